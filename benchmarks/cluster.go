package main

// The cluster scenario: scale-out shown by cost accounting on a 3-master Redis Cluster this
// program starts. One topic with Partitions 6 (then 1) is published to and consumed; the
// INFO commandstats deltas of each master show how the Redis work spreads. See README.md.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

var (
	clusterNFlag          = flag.Int("cluster-n", 200_000, "cluster: messages per partition setting, half published 1 per Publish, half 100 per Publish (with -quick: 10,000 unless given)")
	clusterSubsFlag       = flag.Int("cluster-subs", 3, "cluster: subscribers (one group, each on its own ClusterClient)")
	clusterPartitionsFlag = flag.Int("cluster-partitions", 6, "cluster: partitions of the spread topic (compared with 1)")
	clusterEvenFlag       = flag.Bool("cluster-even", true, "cluster: pick a topic name whose partitions' slots spread evenly over the masters")
)

// clusterFigures are appended to the figure table (results.go) at start-up.
var clusterFigures = []figure{
	{id: "cluster_busiest_share", title: "cluster, 6 partitions: busiest master's share of script CPU", unit: "x", lowerBetter: true, oursOnly: true},
	{id: "cluster_p6_share_m1", title: "cluster, 6 partitions: master 1 share", unit: "x", oursOnly: true},
	{id: "cluster_p6_share_m2", title: "cluster, 6 partitions: master 2 share", unit: "x", oursOnly: true},
	{id: "cluster_p6_share_m3", title: "cluster, 6 partitions: master 3 share", unit: "x", oursOnly: true},
	{id: "cluster_p6_us_per_msg_m1", title: "cluster, 6 partitions: master 1 script CPU per msg", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p6_us_per_msg_m2", title: "cluster, 6 partitions: master 2 script CPU per msg", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p6_us_per_msg_m3", title: "cluster, 6 partitions: master 3 script CPU per msg", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p6_us_per_msg", title: "cluster, 6 partitions: script CPU per msg, all masters", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p1_busiest_share", title: "cluster, 1 partition: busiest master's share of script CPU", unit: "x", lowerBetter: true, oursOnly: true},
	{id: "cluster_p1_share_m1", title: "cluster, 1 partition: master 1 share", unit: "x", oursOnly: true},
	{id: "cluster_p1_share_m2", title: "cluster, 1 partition: master 2 share", unit: "x", oursOnly: true},
	{id: "cluster_p1_share_m3", title: "cluster, 1 partition: master 3 share", unit: "x", oursOnly: true},
	{id: "cluster_p1_us_per_msg_m1", title: "cluster, 1 partition: master 1 script CPU per msg", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p1_us_per_msg_m2", title: "cluster, 1 partition: master 2 script CPU per msg", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p1_us_per_msg_m3", title: "cluster, 1 partition: master 3 script CPU per msg", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_p1_us_per_msg", title: "cluster, 1 partition: script CPU per msg, all masters", unit: "µs", lowerBetter: true, oursOnly: true},
	{id: "cluster_projected_3m", title: "cluster: projected msg/s, 3 one-core masters (script CPU)", unit: "msg/s", oursOnly: true},
	{id: "cluster_projected_3m_proc", title: "cluster: projected msg/s, 3 one-core masters (process CPU)", unit: "msg/s", oursOnly: true},
}

func init() {
	figures = append(figures, clusterFigures...)
	// Starting a cluster and publishing 2 x 200k messages is too costly to repeat per round.
	singleRoundScenarios = append(singleRoundScenarios, "cluster")
}

// scriptCommands are the top-level commands whose usec is counted: the scripts. Redis 7 counts
// the commands a script runs (zadd, hset, …) under their own names too, with their time
// inside the script's, so those are never added.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// masterStats is one master's counters at one moment.
type masterStats struct {
	scriptUsec, scriptCalls float64
	cpu                     float64 // used_cpu_user + used_cpu_sys, seconds
	commands                map[string][2]float64
}

func snapshotMaster(ctx context.Context, c *redis.Client) (masterStats, error) {
	s, err := snapshotStats(ctx, c) // redis.go
	if err != nil {
		return masterStats{}, err
	}
	m := masterStats{cpu: s.cpu, commands: s.commands}
	for _, name := range scriptCommands {
		m.scriptCalls += s.commands[name][0]
		m.scriptUsec += s.commands[name][1]
	}
	return m, nil
}

// clusterPhase is what each master did during one phase (publish, consume).
type clusterPhase struct {
	name     string
	msgs     int
	wall     time.Duration
	usec     []float64 // script usec per master
	calls    []float64 // script calls per master
	cpu      []float64 // process CPU seconds per master
	topInner []string  // per master: the costliest commands by usec, scripts and inner alike
}

func (p clusterPhase) totalUsec() float64 { return sum(p.usec) }
func (p clusterPhase) totalCPU() float64  { return sum(p.cpu) }

func sum(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t
}

func diffPhase(name string, msgs int, wall time.Duration, before, after []masterStats) clusterPhase {
	p := clusterPhase{name: name, msgs: msgs, wall: wall}
	for i := range before {
		p.usec = append(p.usec, after[i].scriptUsec-before[i].scriptUsec)
		p.calls = append(p.calls, after[i].scriptCalls-before[i].scriptCalls)
		p.cpu = append(p.cpu, after[i].cpu-before[i].cpu)
		type row struct {
			name        string
			calls, usec float64
		}
		var rows []row
		for k, v := range after[i].commands {
			b := before[i].commands[k]
			if d := v[0] - b[0]; d > 0 {
				rows = append(rows, row{k, d, v[1] - b[1]})
			}
		}
		slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.usec, a.usec) })
		var parts []string
		for j, r := range rows {
			if j == 4 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.0f calls %.1fµs/call", r.name, r.calls, r.usec/r.calls))
		}
		p.topInner = append(p.topInner, strings.Join(parts, ", "))
	}
	return p
}

// addPhases sums phases (same masters) into one named total.
func addPhases(name string, phases ...clusterPhase) clusterPhase {
	t := clusterPhase{name: name}
	for _, p := range phases {
		t.msgs = max(t.msgs, p.msgs)
		t.wall += p.wall
		if t.usec == nil {
			t.usec = make([]float64, len(p.usec))
			t.calls = make([]float64, len(p.calls))
			t.cpu = make([]float64, len(p.cpu))
		}
		for i := range p.usec {
			t.usec[i] += p.usec[i]
			t.calls[i] += p.calls[i]
			t.cpu[i] += p.cpu[i]
		}
	}
	return t
}

func shares(xs []float64) []float64 {
	t := sum(xs)
	out := make([]float64, len(xs))
	for i, x := range xs {
		if t > 0 {
			out[i] = x / t
		}
	}
	return out
}

func fmtShares(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(parts, " / ")
}

// clusterEnv is the running cluster and a plain client per master.
type clusterEnv struct {
	cluster *redistest.Cluster
	masters []string        // sorted addresses; m1, m2, m3 in the figures
	admins  []*redis.Client // one per master
	slots   []redis.ClusterSlot
}

func (e *clusterEnv) close() {
	for _, c := range e.admins {
		_ = c.Close()
	}
	e.cluster.Close()
}

func (e *clusterEnv) snapshot(ctx context.Context) ([]masterStats, error) {
	out := make([]masterStats, len(e.admins))
	for i, c := range e.admins {
		s, err := snapshotMaster(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("INFO on master %s: %w", e.masters[i], err)
		}
		out[i] = s
	}
	return out, nil
}

// masterOf returns the index in masters of the master that serves slot.
func (e *clusterEnv) masterOf(slot int64) int {
	for _, s := range e.slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return slices.Index(e.masters, s.Nodes[0].Addr)
		}
	}
	return -1
}

// placement returns how many of topic's partitions each master serves.
func (e *clusterEnv) placement(ctx context.Context, topic string, partitions int) ([]int, error) {
	counts := make([]int, len(e.masters))
	for n := range partitions {
		name := topic
		if n > 0 {
			name = topic + "#" + strconv.Itoa(n) // the library's partition hash tags
		}
		slot, err := e.admins[0].ClusterKeySlot(ctx, name).Result()
		if err != nil {
			return nil, err
		}
		i := e.masterOf(slot)
		if i < 0 {
			return nil, fmt.Errorf("no master serves slot %d", slot)
		}
		counts[i]++
	}
	return counts, nil
}

func startClusterEnv(ctx context.Context) (*clusterEnv, error) {
	c, err := redistest.NewCluster(redistest.ClusterOptions{
		// No failover is wanted here: a node stalled by CPU contention must not be voted out.
		NodeTimeout: 15 * time.Second,
		Extra:       []string{"--maxmemory", "0"},
	})
	if err != nil {
		if errors.Is(err, redistest.ErrNotInstalled) {
			return nil, fmt.Errorf("the cluster scenario needs redis-server and redis-cli on the PATH: %w", err)
		}
		return nil, err
	}
	e := &clusterEnv{cluster: c}
	if e.masters, err = c.Masters(); err != nil {
		e.close()
		return nil, err
	}
	for _, m := range e.masters {
		e.admins = append(e.admins, redis.NewClient(&redis.Options{Addr: m, PoolSize: 2}))
	}
	if e.slots, err = e.admins[0].ClusterSlots(ctx).Result(); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// quickMode reports whether -quick was given.
func quickMode() bool {
	f := flag.Lookup("quick")
	return f != nil && f.Value.String() == "true"
}

func (b *bench) clusterN() int {
	if flagGiven("cluster-n") || !quickMode() {
		return max(*clusterNFlag, 2)
	}
	return 10_000
}

func (b *bench) runCluster(sys system) error {
	if sys.name() != sysRedisDelay {
		return nil // redisdelay only
	}
	ctx := context.Background()
	progress("  cluster: starting a Redis Cluster (3 masters, 3 replicas) on loopback")
	started := time.Now()
	env, err := startClusterEnv(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	progress("  cluster: masters %s, ready in %s", strings.Join(env.masters, ", "), time.Since(started).Round(time.Millisecond))
	if len(env.masters) != 3 {
		return fmt.Errorf("cluster has %d masters, want 3", len(env.masters))
	}
	spreadP := max(*clusterPartitionsFlag, 1)
	var runs = map[int][]clusterPhase{}
	settings := []int{spreadP, 1}
	if spreadP == 1 {
		settings = settings[1:]
	}
	for _, partitions := range settings {
		phases, err := b.clusterRun(ctx, env, partitions)
		if err != nil {
			return fmt.Errorf("partitions %d: %w", partitions, err)
		}
		runs[partitions] = phases
		for _, c := range env.admins {
			if err := c.FlushAll(ctx).Err(); err != nil {
				return err
			}
		}
	}
	b.clusterProjection(runs[spreadP], runs[1], spreadP, len(env.masters))
	return nil
}

// clusterTopic picks the topic: with -cluster-even, the first of bench-cluster-p<P>-<k> whose
// partitions spread as evenly as possible over the masters.
func (b *bench) clusterTopic(ctx context.Context, env *clusterEnv, partitions int) (string, []int, error) {
	base := fmt.Sprintf("bench-cluster-p%d", partitions)
	m := len(env.masters)
	limit := (partitions + m - 1) / m
	var firstCounts []int
	for k := range 1000 {
		topic := fmt.Sprintf("%s-%d", base, k)
		counts, err := env.placement(ctx, topic, partitions)
		if err != nil {
			return "", nil, err
		}
		if k == 0 {
			firstCounts = counts
		}
		if !*clusterEvenFlag || partitions == 1 || slices.Max(counts) <= limit {
			if k > 0 {
				b.res.note("cluster / %d partitions: topic %s chosen so that its partitions spread evenly over the masters (%s); the first candidate %s-0 would have put %s on them (slot placement decides; reshard slots or name topics to balance; -cluster-even=false to take the first)",
					partitions, topic, fmtCounts(counts), base, fmtCounts(firstCounts))
			}
			return topic, counts, nil
		}
	}
	return "", nil, fmt.Errorf("no topic name with an even spread of %d partitions found", partitions)
}

func fmtCounts(cs []int) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, "/")
}

// clusterRun publishes and consumes one topic with the given partitions and records the
// per-master accounting. It returns the phases summed.
func (b *bench) clusterRun(ctx context.Context, env *clusterEnv, partitions int) ([]clusterPhase, error) {
	topic, counts, err := b.clusterTopic(ctx, env, partitions)
	if err != nil {
		return nil, err
	}
	total := b.clusterN()
	singles, batched := total/2, total-total/2
	subs := max(*clusterSubsFlag, 1)
	progress("  cluster: Partitions %d, topic %s, partitions per master %s; %d msgs 1 per Publish + %d msgs 100 per Publish, then %d subscribers",
		partitions, topic, fmtCounts(counts), singles, batched, subs)

	newCC := func(pool int) *redis.ClusterClient {
		opts := env.cluster.ClientOptions()
		opts.PoolSize = pool
		return redis.NewClusterClient(opts)
	}
	// Register the group first, as a user would.
	{
		cc := newCC(4)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: cc, ConsumerGroup: consumerGroup, Partitions: partitions}, watermill.NopLogger{})
		if err != nil {
			_ = cc.Close()
			return nil, err
		}
		err = sub.SubscribeInitialize(topic)
		_ = sub.Close()
		_ = cc.Close()
		if err != nil {
			return nil, err
		}
	}

	pubClient := newCC(poolSize * 2)
	defer pubClient.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: pubClient, Partitions: partitions}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	publish := func(n, batch int) (int, time.Duration, error) {
		var (
			next, done atomic.Int64
			firstErr   error
			once       sync.Once
			wg         sync.WaitGroup
		)
		start := time.Now()
		deadline := start.Add(2 * time.Minute)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					first := int(next.Add(int64(batch))) - batch
					if first >= n {
						return
					}
					msgs := make([]*message.Message, 0, batch)
					for range min(batch, n-first) {
						msgs = append(msgs, message.NewMessage(watermill.NewUUID(), b.payload))
					}
					if err := pub.Publish(topic, msgs...); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
					done.Add(int64(len(msgs)))
				}
			}()
		}
		wg.Wait()
		return int(done.Load()), time.Since(start), firstErr
	}

	var phases []clusterPhase
	measure := func(name string, fn func() (int, error)) error {
		before, err := env.snapshot(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		n, err := fn()
		wall := time.Since(start)
		if err != nil {
			return err
		}
		after, err := env.snapshot(ctx)
		if err != nil {
			return err
		}
		p := diffPhase(name, n, wall, before, after)
		phases = append(phases, p)
		progress("  cluster: P%d %s: %d msgs in %s (%.0f msg/s); script CPU per master %s µs/msg (shares %s), %.1f msgs per script call; process CPU per master %s µs/msg",
			partitions, name, n, wall.Round(time.Millisecond), float64(n)/wall.Seconds(),
			fmtPerMsg(p.usec, n), fmtShares(shares(p.usec)), float64(n)/max(sum(p.calls), 1), fmtPerMsg(scale(p.cpu, 1e6), n))
		for i, top := range p.topInner {
			progress("    m%d %s: %s", i+1, env.masters[i], top)
		}
		return nil
	}

	if err := measure("publish 1/call", func() (int, error) {
		n, _, err := publish(singles, 1)
		if err == nil && n < singles {
			err = fmt.Errorf("publish 1/call: only %d of %d within 2 min", n, singles)
		}
		return n, err
	}); err != nil {
		return nil, err
	}
	if err := measure("publish 100/call", func() (int, error) {
		n, _, err := publish(batched, 100)
		if err == nil && n < batched {
			err = fmt.Errorf("publish 100/call: only %d of %d within 2 min", n, batched)
		}
		return n, err
	}); err != nil {
		return nil, err
	}
	if err := measure(fmt.Sprintf("consume, %d subs", subs), func() (int, error) {
		return b.clusterConsume(env, topic, partitions, subs, total)
	}); err != nil {
		return nil, err
	}

	all := addPhases("all", phases...)
	all.msgs = total
	sh := shares(all.usec)
	busiest := slices.Max(sh)
	prefix := fmt.Sprintf("cluster_p%d_", partitions)
	busiestID := prefix + "busiest_share"
	if partitions == 6 { // the figure table names 6 and 1; other -cluster-partitions go to notes
		busiestID = "cluster_busiest_share"
	}
	known := func(id string) bool { return slices.ContainsFunc(figures, func(f figure) bool { return f.id == id }) }
	var phaseNotes []string
	for _, p := range phases {
		phaseNotes = append(phaseNotes, fmt.Sprintf("%s: %.0f msg/s, %.1f msgs per script call, script CPU %s µs/msg per master (shares %s), process CPU %s µs/msg per master",
			p.name, float64(p.msgs)/p.wall.Seconds(), float64(p.msgs)/max(sum(p.calls), 1), fmtPerMsg(p.usec, p.msgs), fmtShares(shares(p.usec)), fmtPerMsg(scale(p.cpu, 1e6), p.msgs)))
	}
	note := fmt.Sprintf("topic %s, partitions per master %s (masters %s); %d msgs published (half 1/call, half 100/call) and consumed by %d subscribers; %s",
		topic, fmtCounts(counts), strings.Join(env.masters, ", "), total, subs, strings.Join(phaseNotes, "; "))
	if partitions != 1 {
		note = joinNote(note, fmt.Sprintf("target <= %.3f (1/3 + 10 %%)", 1.0/3+0.1))
	}
	if known(busiestID) {
		b.res.set(busiestID, sysRedisDelay, busiest, note)
	} else {
		b.res.note("cluster %d partitions: busiest share %.3f; %s", partitions, busiest, note)
	}
	for i := range env.masters {
		if id := fmt.Sprintf("%sshare_m%d", prefix, i+1); known(id) {
			b.res.set(id, sysRedisDelay, sh[i], "")
		}
		if id := fmt.Sprintf("%sus_per_msg_m%d", prefix, i+1); known(id) {
			b.res.set(id, sysRedisDelay, all.usec[i]/float64(total), "")
		}
	}
	if id := prefix + "us_per_msg"; known(id) {
		b.res.set(id, sysRedisDelay, all.totalUsec()/float64(total), fmt.Sprintf("process CPU (used_cpu_user+sys, incl. I/O and replication) %s µs/msg per master", fmtPerMsg(scale(all.cpu, 1e6), total)))
	}
	progress("  cluster: P%d all phases: shares %s, busiest %.3f; script CPU %s µs/msg per master, %.1f µs/msg in all",
		partitions, fmtShares(sh), busiest, fmtPerMsg(all.usec, total), all.totalUsec()/float64(total))
	return phases, nil
}

func scale(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * f
	}
	return out
}

func fmtPerMsg(usec []float64, n int) string {
	parts := make([]string, len(usec))
	for i, u := range usec {
		parts[i] = fmt.Sprintf("%.2f", u/float64(max(n, 1)))
	}
	return strings.Join(parts, " / ")
}

// clusterConsume consumes want messages of topic with subs subscribers of one group, each on its
// own ClusterClient, within a time cap.
func (b *bench) clusterConsume(env *clusterEnv, topic string, partitions, subs, want int) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cnt := newCounter(want)
	var (
		wg      sync.WaitGroup
		closers []func()
	)
	defer func() {
		cancel()
		for _, c := range closers {
			c()
		}
		wg.Wait()
	}()
	for range subs {
		opts := env.cluster.ClientOptions()
		opts.PoolSize = poolSize
		cc := redis.NewClusterClient(opts)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: cc, ConsumerGroup: consumerGroup, Partitions: partitions}, watermill.NopLogger{})
		if err != nil {
			_ = cc.Close()
			return 0, err
		}
		closers = append(closers, func() { _ = sub.Close(); _ = cc.Close() })
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range ch {
				cnt.add()
				msg.Ack()
			}
		}()
	}
	capDur := 3 * time.Minute
	got, _, ok := cnt.wait(time.Now().Add(capDur))
	if !ok {
		return got, fmt.Errorf("consume: only %d of %d within %s", got, want, capDur)
	}
	// Let the last acks reach Redis before the counters are read.
	time.Sleep(200 * time.Millisecond)
	return got, nil
}

// pathCost is the Redis CPU per message of a path through the phases (each message goes through
// every phase given once), summed over the masters, and the balance: the mean master's part
// over the busiest's. proc selects process CPU (used_cpu) instead of script usec.
func pathCost(proc bool, phases ...clusterPhase) (c, balance float64) {
	var per []float64
	for _, p := range phases {
		xs := p.usec
		if proc {
			xs = scale(p.cpu, 1e6)
		}
		if per == nil {
			per = make([]float64, len(xs))
		}
		for i, x := range xs {
			per[i] += x / float64(max(p.msgs, 1))
		}
	}
	c = sum(per)
	if c == 0 {
		return 0, 0
	}
	return c, c / float64(len(per)) / slices.Max(per)
}

// clusterProjection sets the projected figures and prints the projection lines. spread and
// single are the phases (publish 1/call, publish 100/call, consume) of the partitioned topic and
// of the one-partition topic.
func (b *bench) clusterProjection(spread, single []clusterPhase, partitions, m int) {
	if len(spread) != 3 || len(single) != 3 {
		return
	}
	proj := func(masters int, c, eff float64) float64 { return float64(masters) * 1e6 / c * eff }
	// The mix as run: half the messages published 1 per call, half 100 per call, all consumed.
	mix := func(ph []clusterPhase, proc bool) (float64, float64) {
		return pathCost(proc, addPhases("all", ph...).withMsgs(ph[2].msgs))
	}
	cS, eS := mix(spread, false)
	cP, eP := mix(spread, true)
	b.res.set("cluster_projected_3m", sysRedisDelay, proj(m, cS, eS), fmt.Sprintf("%d x 1e6 / %.1f µs script CPU per msg x balance %.2f", m, cS, eS))
	b.res.set("cluster_projected_3m_proc", sysRedisDelay, proj(m, cP, eP), fmt.Sprintf("%d x 1e6 / %.1f µs process CPU per msg x balance %.2f", m, cP, eP))
	var lines []string
	for _, path := range []struct {
		name string
		of   func(ph []clusterPhase, proc bool) (float64, float64)
	}{
		{"mix as run (half 1/call, half 100/call, all consumed)", mix},
		{"publish 1/call + consume", func(ph []clusterPhase, proc bool) (float64, float64) { return pathCost(proc, ph[0], ph[2]) }},
		{"publish 100/call + consume", func(ph []clusterPhase, proc bool) (float64, float64) { return pathCost(proc, ph[1], ph[2]) }},
	} {
		var parts []string
		for _, proc := range []bool{false, true} {
			what := "script CPU"
			if proc {
				what = "process CPU"
			}
			c, e := path.of(spread, proc)
			c1, _ := path.of(single, proc)
			parts = append(parts, fmt.Sprintf("%s c = %.1f µs, e = %.2f: M=%d → %.0f msg/s, M=%d → %.0f msg/s (Partitions 1 on one master: c = %.1f µs → %.0f msg/s)",
				what, c, e, m, proj(m, c, e), partitions, proj(partitions, c, e), c1, 1e6/c1))
		}
		lines = append(lines, path.name+": "+strings.Join(parts, "; "))
	}
	head := fmt.Sprintf("cluster projection, Partitions %d: with M masters of one core each, throughput ≈ M × 1e6 / c × e, where c = Redis CPU µs per message (published once, consumed once) on the master that owns it and e = balance (mean master / busiest master) measured with 3 masters. "+
		"Assumes the clients are not the limit (c measured with 16 publishing goroutines and %d subscribers; fewer concurrent callers per partition mean smaller group commits), messages spread evenly over partitions, partitions ≥ M placed evenly, and each master's whole core goes to this topic.",
		partitions, max(*clusterSubsFlag, 1))
	b.res.note("%s", head)
	progress("  %s", head)
	for _, l := range lines {
		b.res.note("cluster projection, %s", l)
		progress("  cluster projection, %s", l)
	}
}

// withMsgs returns p with msgs set.
func (p clusterPhase) withMsgs(n int) clusterPhase {
	p.msgs = n
	return p
}

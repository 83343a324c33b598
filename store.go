package redisdelay

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// store is the only code that talks to Redis about the queue's data: every script has one Go
// wrapper here, and every key comes from keySpace. Its part parameters name a topic partition
// in the key space (see partitionName).
type store struct {
	client redis.UniversalClient
	keys   keySpace
	// shebang records whether the server accepts script flags; shared by copies of the store.
	shebang *shebangSupport
	// contextTimeouts is whether the client bounds calls by their context (see bounded).
	contextTimeouts bool
	// direct makes every call run on the caller's goroutine even when the client does not bound
	// it by its context: for a caller that bounds the wait itself (a group commit round, see
	// groupcommit.Committer), which saves a goroutine and a hand-off per call.
	direct bool
	// durableReplicas, when > 0, makes publish WAIT for that many replicas, durableTimeout at
	// most.
	durableReplicas int
	durableTimeout  time.Duration
	// metrics records each script call's duration; nil records nothing.
	metrics *Metrics
}

// run is the one path of every script call: bounded by ctx (see bounded), on the script form the
// server supports, with the error classified (see classify) and named after the script.
func (s store) run(ctx context.Context, c redis.Scripter, sc *script, keys []string, args ...any) (any, error) {
	if err := sc.checkKeys(keys); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { s.metrics.script(sc.name, time.Since(start)) }()
	res, err := bounded(ctx, s.contextTimeouts || s.direct, func(ctx context.Context) (any, error) {
		if s.shebang.unsupported.Load() {
			return sc.plain.Run(ctx, c, keys, args...).Result()
		}
		res, err := sc.flagged.Run(ctx, c, keys, args...).Result()
		if err != nil && isShebangRefused(err) {
			s.shebang.unsupported.Store(true)
			return sc.plain.Run(ctx, c, keys, args...).Result()
		}
		return res, err
	})
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", sc.name, classify(err))
	}
	return res, nil
}

// isShebangRefused reports a compile error at the shebang line, from a server that predates
// script flags.
func isShebangRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "compiling script") && strings.Contains(msg, "'#'")
}

// classify wraps ErrRedisFull around an OOM reply, and ErrOutcomeUnknown around an error after
// which the command may have run: a timeout or a connection lost after sending. Errors that
// prove the command did not run (a reply error, a refused dial, a closed client or pool) are
// returned as they are.
func classify(err error) error {
	var reply redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &reply):
		if strings.HasPrefix(reply.Error(), "OOM") {
			return fmt.Errorf("%w: %w", ErrRedisFull, err)
		}
		return err
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.As(err, &op) && op.Op == "dial":
		return err
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// stored is a message ready to be published: its marshaled form and when it is due, either
// delay after the Redis clock at publish time, but no later than latest when latest is set, or,
// when at is set, at that instant.
type outgoing struct {
	data   []byte
	delay  time.Duration
	at     time.Time
	latest time.Time
	// keySpec is "" for a message without a key, else the duplicate policy, the history
	// retention and the key, as publish_to in lua/lib expects them.
	keySpec string
}

// scheduleArg encodes when a message is due for publish_to in lib.lua: a delay in µs; "@" and
// a Unix time in µs; or a delay in µs, "<" and the latest due time as a Unix time in µs.
func (m outgoing) scheduleArg() any {
	switch {
	case !m.at.IsZero():
		return "@" + strconv.FormatInt(m.at.UnixMicro(), 10)
	case !m.latest.IsZero():
		return strconv.FormatInt(m.delay.Microseconds(), 10) + "<" + strconv.FormatInt(m.latest.UnixMicro(), 10)
	}
	return m.delay.Microseconds()
}

// errStaleGroups means the caller's view of a topic's consumer groups was out of date; groups
// are the ones registered now.
type staleGroupsError struct{ groups []string }

func (staleGroupsError) Error() string { return "registered consumer groups changed" }

// errLeaseLost means a script refused an operation because the caller's lease had expired and
// the message had been claimed again (fencing).
var errLeaseLost = errors.New("lease lost")

// newToken returns a random token of 16 characters that names one publish or claim call, so
// that a second run of the call is recognised.
func newToken() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// publishCall names one run of publish_to: its token and how long Redis keeps it (ms).
type publishCall struct {
	token string
	ttl   time.Duration
}

// publishTarget appends the keys and arguments that publish_to in lib.lua expects for a topic:
// its keys, then the call key lifetime, the groups, their wake channels and the messages.
func (s store) publishTarget(keys []string, args []any, part string, call publishCall, groups []string, msgs []outgoing) ([]string, []any) {
	tk := s.keys.topic(part)
	keys = append(keys, s.keys.call(part, call.token), tk.seq, tk.messages, tk.refs, tk.groups, tk.parked, tk.history, tk.batches, tk.window)
	keys, args = s.groupTargets(keys, append(args, call.ttl.Milliseconds()), part, groups, false, true)
	for _, m := range msgs {
		args = append(args, m.data, m.scheduleArg(), m.keySpec)
	}
	return keys, args
}

// groupTargets appends the per-group keys and arguments that publish_to and the scripts by key
// share: to keys, the groups' due sets, their lease sets (with leases), then their keyed
// hashes; to args, the number of groups, their names and (with wake) their wake channels.
func (s store) groupTargets(keys []string, args []any, part string, groups []string, leases, wake bool) ([]string, []any) {
	gks := make([]groupKeys, len(groups))
	args = append(args, len(groups))
	for i, g := range groups {
		gks[i] = s.keys.group(part, g)
		keys = append(keys, gks[i].due)
		args = append(args, g)
	}
	for _, gk := range gks {
		if leases {
			keys = append(keys, gk.lease)
		}
	}
	for _, gk := range gks {
		keys = append(keys, gk.keyed)
	}
	for _, gk := range gks {
		if wake {
			args = append(args, gk.wakeChannel)
		}
	}
	return keys, args
}

// publishReply reads the reply of publish_to: its outcome letters (one per message, see
// publish_to), or *errStaleGroups or errLeaseLost. Any other reply is an error naming the
// script.
func publishReply(name string, reply any) (string, error) {
	res, _ := reply.([]any)
	if len(res) == 0 {
		return "", fmt.Errorf("script %s: unexpected reply %v", name, reply)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		if len(res) == 3 {
			outcomes, ok := res[2].(string)
			if ok {
				return outcomes, nil
			}
		}
	case -1:
		return "", errLeaseLost
	case 0:
		stale := &staleGroupsError{}
		for _, g := range res[1:] {
			name, _ := g.(string)
			stale.groups = append(stale.groups, name)
		}
		return "", stale
	}
	return "", fmt.Errorf("script %s: unexpected reply %v", name, reply)
}

// publish runs publish.lua for one batch, scheduled for the given groups (none: parked for the
// first group that registers), and returns the outcome letter of each message (see
// publish_to). It returns *errStaleGroups with the current groups when the caller's view is
// wrong; nothing is stored then. A second run of the same call stores nothing and returns the
// first run's outcomes.
func (s store) publish(ctx context.Context, part string, call publishCall, groups []string, msgs []outgoing) (string, error) {
	keys, args := s.publishTarget(make([]string, 0, 9+2*len(groups)), make([]any, 0, 2+2*len(groups)+3*len(msgs)), part, call, groups, msgs)
	if s.durableReplicas > 0 {
		return s.publishDurably(ctx, keys, args)
	}
	res, err := s.run(ctx, s.client, publishScript, keys, args...)
	if err != nil {
		return "", err
	}
	return publishReply(publishScript.name, res)
}

// publishDurably runs publish.lua and then WAIT on one connection to the master that owns the
// keys, since WAIT counts the replicas that have that connection's writes. Once the script ran,
// the messages are stored, so every failure of WAIT (too few replicas, a lost connection, the
// end of ctx) wraps ErrNotDurable.
func (s store) publishDurably(ctx context.Context, keys []string, args []any) (string, error) {
	connect, ok := masterConn(s.client)
	if !ok {
		return "", fmt.Errorf("DurableReplicas needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
	}
	conn, err := bounded(ctx, s.contextTimeouts || s.direct, func(ctx context.Context) (*redis.Conn, error) { return connect(ctx, keys[0]) })
	if err != nil {
		return "", err
	}
	defer conn.Close()
	res, err := s.run(ctx, conn, publishScript, keys, args...)
	var outcomes string
	if err == nil {
		outcomes, err = publishReply(publishScript.name, res)
	}
	if err != nil {
		return "", err
	}
	replicas, err := bounded(ctx, s.contextTimeouts || s.direct, func(ctx context.Context) (int64, error) {
		return conn.Do(ctx, "WAIT", s.durableReplicas, s.durableTimeout.Milliseconds()).Int64()
	})
	switch {
	case err != nil:
		return outcomes, fmt.Errorf("%w: stored, but WAIT failed: %w", ErrNotDurable, err)
	case replicas < int64(s.durableReplicas):
		return outcomes, fmt.Errorf("%w: %d of %d replicas within %s", ErrNotDurable, replicas, s.durableReplicas, s.durableTimeout)
	}
	return outcomes, nil
}

// masterConn returns a function that opens a connection of its own to the master that owns a
// key, for the clients that can do that: *redis.Client and *redis.ClusterClient.
func masterConn(client redis.UniversalClient) (func(ctx context.Context, key string) (*redis.Conn, error), bool) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return func(ctx context.Context, key string) (*redis.Conn, error) {
			master, err := c.MasterForKey(ctx, key)
			if err != nil {
				return nil, err
			}
			return master.Conn(), nil
		}, true
	case *redis.Client:
		return func(context.Context, string) (*redis.Conn, error) { return c.Conn(), nil }, true
	}
	return nil, false
}

// deadLetterTokenTTL is how long the token of a dead letter moved to another hash slot is kept:
// while it is, a move that runs again (its second step failed, or the consumer died between
// the steps and the message came back) publishes nothing more.
const deadLetterTokenTTL = 7 * 24 * time.Hour

// deadLetter publishes letter to the dead-letter topic for the given groups and ends the source
// group's hold on c. When both topics share a hash slot it is one call of deadletter.lua. Else
// it takes two steps that can each run again without harm, after a check that c is still
// leased (extend.lua, which also gives the steps a full lease): publish.lua with a token
// derived from the message (so a repeated first step publishes nothing more), then ack.lua,
// fenced by the lease. It returns errLeaseLost or *errStaleGroups when nothing was changed.
func (s store) deadLetter(ctx context.Context, part, group string, c *claimed, reason, deadLetterPart string, groups []string, letter []byte, lease time.Duration) error {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	call := publishCall{token: "dl:" + part + ":" + group + ":" + c.id, ttl: deadLetterTokenTTL}
	msgs := []outgoing{{data: letter}}
	if !s.keys.sameSlot(part, deadLetterPart) {
		lost, err := s.extend(ctx, part, group, lease, []*claimed{c})
		if err != nil {
			return err
		}
		if len(lost) > 0 {
			return errLeaseLost
		}
		keys, args := s.publishTarget(nil, nil, deadLetterPart, call, groups, msgs)
		res, err := s.run(ctx, s.client, deadLetterPublishScript, keys, args...)
		if err == nil {
			_, err = publishReply(deadLetterPublishScript.name, res)
		}
		if err != nil {
			return err
		}
		refused, err := s.finish(ctx, part, group, "dead-lettered", reason, []*claimed{c})
		if err == nil && len(refused) > 0 {
			err = errLeaseLost
		}
		return err
	}
	keys, args := s.publishTarget([]string{gk.lease, tk.messages, tk.refs, gk.keyed, tk.history}, []any{c.member(), group, reason}, deadLetterPart, call, groups, msgs)
	res, err := s.run(ctx, s.client, deadLetterScript, keys, args...)
	if err != nil {
		return err
	}
	_, err = publishReply(deadLetterScript.name, res)
	return err
}

// bounded runs f and returns when it does or when ctx is done, whichever comes first.
//
// Why: go-redis honours a context deadline on the socket only when the client has
// ContextTimeoutEnabled; otherwise a call against a server that accepts and never answers
// waits for ReadTimeout (3 s by default) on each of MaxRetries+1 tries. The client is the
// application's, so the adapter cannot turn that option on. When the client has it (direct),
// f runs on the caller's goroutine, and go-redis sets the socket deadlines, the pool wait and
// the retry backoff from ctx, which bounds the call by itself. Otherwise f runs on a goroutine
// of its own and is abandoned at the deadline: it finishes in the background and may still
// take effect, which is safe because every script is atomic (whole or not at all) and the
// publish and claim scripts recognise a second run.
func bounded[T any](ctx context.Context, direct bool, f func(context.Context) (T, error)) (T, error) {
	if direct {
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// registerGroup registers a consumer group on a topic (register.lua) and returns its epoch (see
// register.lua). From then on every message published to the topic is scheduled for the group
// too; the first group of a topic also receives the messages published before any group was
// registered, and opens the new-group window for window (0: none), within which every group
// that registers receives the messages the window keeps. It writes nothing when the group is
// registered already. It also returns how much of the window is left on the Redis clock (ms
// precision), or -1 when no window is open.
func (s store) registerGroup(ctx context.Context, part, group string, window time.Duration) (string, time.Duration, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	keys := []string{tk.groups, tk.parked, gk.due, tk.window, tk.refs, tk.messages, tk.history, tk.seq, gk.epoch}
	res, err := s.run(ctx, s.client, registerScript, keys, group, gk.wakeChannel, window.Milliseconds(), NewGroupWindowMaxMessages)
	if err != nil {
		return "", 0, err
	}
	r, _ := res.([]any)
	if len(r) != 3 {
		return "", 0, fmt.Errorf("script %s: unexpected reply %v", registerScript.name, res)
	}
	epoch, _ := r[2].(string)
	if code, ok := r[0].(int64); !ok || code < 0 || code > 2 || epoch == "" {
		return "", 0, fmt.Errorf("script %s: unexpected reply %v", registerScript.name, res)
	}
	return epoch, windowLeft(r[1]), nil
}

// windowLeft reads a reply's ms left of a new-group window: -1 when none is open.
func windowLeft(v any) time.Duration {
	if ms := asInt(v); ms >= 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return -1
}

// closeWindowLimit is how many members of a closed window's parked set one closeWindow call
// drops.
const closeWindowLimit = 1000

// closeWindow runs closewindow.lua once on a topic partition: when its new-group window has
// closed, it drops up to closeWindowLimit members of what the window left in the parked set.
// It returns how many are left, and how much of the window is left (-1 when it is closed).
func (s store) closeWindow(ctx context.Context, part string) (int64, time.Duration, error) {
	tk := s.keys.topic(part)
	res, err := s.run(ctx, s.client, closeWindowScript, []string{tk.groups, tk.parked, tk.window, tk.messages, tk.refs, tk.history}, closeWindowLimit)
	if err != nil {
		return 0, 0, err
	}
	r, _ := res.([]any)
	if len(r) != 2 {
		return 0, 0, fmt.Errorf("script %s: unexpected reply %v", closeWindowScript.name, res)
	}
	return asInt(r[0]), windowLeft(r[1]), nil
}

// claimed is one message a subscription holds a lease on.
type claimed struct {
	id        string
	attempt   int64
	dueUs     int64  // due time, Unix µs on the Redis clock
	data      []byte // the stored message
	uuid      string // the message UUID, once decoded, for logs
	delivered bool   // handed to the application
	lost      bool   // its lease was found lost before it was handed out: it never will be
}

// member is the message's name in the lease sorted set, ID:attempt: the lease's fencing token.
func (c *claimed) member() string { return c.id + ":" + strconv.FormatInt(c.attempt, 10) }

// claimResult is what one claim call returns.
type claimResult struct {
	nowUs       int64    // Redis clock when the script ran, Unix µs
	nextDueUs   int64    // earliest due time left in the group, -1 if none
	nextLeaseUs int64    // earliest lease deadline in the group, -1 if none
	refusedAcks []string // IDs whose ack was refused: the lease had been lost
	dropped     int64    // due entries dropped: malformed, or their stored message vanished
	expired     int64    // leases that had expired and were made due again
	messages    []*claimed
}

// claimCall names one claim: the subscription's claim record key and the claim's token.
type claimCall struct {
	record, token string
}

// claim runs claim.lua: it acknowledges acks, then claims up to limit due messages for the
// group registered as epoch, closing each claimed batch that was still its batch key's open
// batch. A claim whose token the record holds already ran; it is answered again from the
// record. It returns an error wrapping ErrGroupRemoved when the group's epoch changed: the
// group was removed.
func (s store) claim(ctx context.Context, part, group, epoch string, call claimCall, limit int, lease time.Duration, acks []*claimed) (claimResult, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	args := make([]any, 0, 5+len(acks))
	args = append(args, limit, lease.Microseconds(), call.token, group, epoch)
	for _, a := range acks {
		args = append(args, a.member())
	}
	reply, err := s.run(ctx, s.client, claimScript, []string{gk.due, gk.lease, tk.messages, tk.refs, call.record, gk.keyed, tk.history, gk.paused, tk.batches, gk.epoch}, args...)
	if err != nil {
		return claimResult{}, err
	}
	res, _ := reply.([]any)
	if len(res) == 1 && asInt(res[0]) == -1 {
		return claimResult{}, fmt.Errorf("consumer group %s on %s: %w", quote(group), quote(part), ErrGroupRemoved)
	}
	if len(res) < 6 || (len(res)-6)%4 != 0 {
		return claimResult{}, fmt.Errorf("script %s: unexpected reply of %d values", claimScript.name, len(res))
	}
	r := claimResult{
		nowUs:       asInt(res[0]),
		nextDueUs:   asInt(res[1]),
		nextLeaseUs: asInt(res[2]),
		refusedAcks: asStrings(res[3]),
		dropped:     asInt(res[4]),
		expired:     asInt(res[5]),
	}
	for i := 6; i < len(res); i += 4 {
		id, _ := res[i].(string)
		data, _ := res[i+3].(string)
		r.messages = append(r.messages, &claimed{
			id:      id,
			attempt: asInt(res[i+1]),
			dueUs:   asInt(res[i+2]),
			data:    []byte(data),
		})
	}
	return r, nil
}

// ack runs ack.lua and returns the IDs whose ack was refused because their lease had been lost.
func (s store) ack(ctx context.Context, part, group string, acks []*claimed) ([]string, error) {
	return s.finish(ctx, part, group, "acked", "", acks)
}

// finish runs ack.lua, recording outcome and reason in the history of keyed messages (see
// ended in lua/lib), and returns the IDs whose lease had been lost.
func (s store) finish(ctx context.Context, part, group, outcome, reason string, acks []*claimed) ([]string, error) {
	if len(acks) == 0 {
		return nil, nil
	}
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	args := make([]any, 0, 3+len(acks))
	args = append(args, group, outcome, reason)
	for _, a := range acks {
		args = append(args, a.member())
	}
	res, err := s.run(ctx, s.client, ackScript, []string{gk.lease, tk.messages, tk.refs, gk.keyed, tk.history}, args...)
	if err != nil {
		return nil, err
	}
	return asStrings(res), nil
}

// release runs release.lua for messages a stopping subscription still holds, and for the
// messages of its last claim when that claim's reply did not arrive (call.token is then that
// claim's token, else empty).
func (s store) release(ctx context.Context, part, group string, call claimCall, held []*claimed) error {
	if len(held) == 0 && call.token == "" {
		return nil
	}
	gk := s.keys.group(part, group)
	args := make([]any, 0, 2+3*len(held))
	args = append(args, gk.wakeChannel, call.token)
	for _, c := range held {
		delivered := 0
		if c.delivered {
			delivered = 1
		}
		args = append(args, c.member(), c.dueUs, delivered)
	}
	_, err := s.run(ctx, s.client, releaseScript, []string{gk.due, gk.lease, call.record, gk.keyed}, args...)
	return err
}

// nack runs nack.lua. changed is the re-marshaled message when the consumer modified it, else
// nil. It returns errLeaseLost when the lease had been lost.
func (s store) nack(ctx context.Context, part, group string, c *claimed, delay time.Duration, changed []byte) error {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	args := []any{c.member(), delay.Microseconds(), gk.wakeChannel}
	if changed != nil {
		args = append(args, changed)
	}
	res, err := s.run(ctx, s.client, nackScript, []string{gk.due, gk.lease, tk.messages, tk.refs, tk.seq, tk.history}, args...)
	if err != nil {
		return err
	}
	if score, ok := res.(int64); !ok {
		return fmt.Errorf("script %s: unexpected reply %v", nackScript.name, res)
	} else if score < 0 {
		return errLeaseLost
	}
	return nil
}

// extend runs extend.lua and returns the IDs whose lease had been lost.
func (s store) extend(ctx context.Context, part, group string, lease time.Duration, held []*claimed) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	gk := s.keys.group(part, group)
	args := make([]any, 0, 1+len(held))
	args = append(args, lease.Microseconds())
	for _, c := range held {
		args = append(args, c.member())
	}
	res, err := s.run(ctx, s.client, extendScript, []string{gk.lease}, args...)
	if err != nil {
		return nil, err
	}
	return asStrings(res), nil
}

// asInt reads an integer reply element; Redis returns integers as int64 and scores as strings.
func asInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(v, 64)
		return int64(f)
	}
	return 0
}

// asStrings reads an array reply element of strings.
func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// newStore returns the store of a Publisher or Subscriber.
func newStore(client redis.UniversalClient, prefix string) store {
	return store{
		client:          client,
		keys:            keySpace{prefix: prefix},
		shebang:         &shebangSupport{},
		contextTimeouts: honoursContextDeadlines(client),
	}
}

// honoursContextDeadlines reports whether client has go-redis's ContextTimeoutEnabled.
func honoursContextDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// byKeyTarget returns the keys and arguments that cancel.lua, reschedule.lua and status.lua
// share: the given topic keys, the call key when call has a token, then per group its due set,
// lease set and keyed hash; the call key lifetime (with a token), the key, and (through
// groupTargets) the groups' count, names and wake channels.
func (s store) byKeyTarget(part, key string, call publishCall, topicKeys []string, extra []any, groups []string, wake bool) ([]string, []any) {
	var keys []string
	var args []any
	if call.token != "" {
		keys = append(keys, s.keys.call(part, call.token))
		args = append(args, call.ttl.Milliseconds())
	}
	keys = append(keys, topicKeys...)
	args = append(append(args, key), extra...)
	return s.groupTargets(keys, args, part, groups, true, wake)
}

// cancel runs cancel.lua for key on a topic partition, for the given groups, and returns its
// state letters: the parked set's, then one per group (see cancel.lua). It returns
// *errStaleGroups when the view of the groups is stale; nothing is changed then.
func (s store) cancel(ctx context.Context, part, key string, call publishCall, groups []string) (string, error) {
	tk := s.keys.topic(part)
	keys, args := s.byKeyTarget(part, key, call, []string{tk.messages, tk.refs, tk.groups, tk.parked, tk.history}, nil, groups, false)
	res, err := s.run(ctx, s.client, cancelScript, keys, args...)
	if err != nil {
		return "", err
	}
	states, _, err := byKeyReply(cancelScript.name, res, len(groups))
	return states, err
}

// reschedule runs reschedule.lua: key's message becomes due at m's schedule in every group
// that holds it due. It returns the state letters (see reschedule.lua) and the new due time
// in Unix µs, or *errStaleGroups.
func (s store) reschedule(ctx context.Context, part, key string, call publishCall, m outgoing, groups []string) (string, int64, error) {
	tk := s.keys.topic(part)
	keys, args := s.byKeyTarget(part, key, call, []string{tk.messages, tk.groups, tk.parked, tk.history}, []any{m.scheduleArg()}, groups, true)
	res, err := s.run(ctx, s.client, rescheduleScript, keys, args...)
	if err != nil {
		return "", 0, err
	}
	return byKeyReply(rescheduleScript.name, res, len(groups))
}

// byKeyReply reads the reply of cancel.lua or reschedule.lua: the state letters, and the due
// time when the script gives one.
func byKeyReply(name string, reply any, groups int) (string, int64, error) {
	res, _ := reply.([]any)
	if len(res) > 0 {
		if code, _ := res[0].(int64); code == 0 {
			stale := &staleGroupsError{groups: asStrings(res[1:])}
			return "", 0, stale
		}
	}
	if len(res) < 2 {
		return "", 0, fmt.Errorf("script %s: unexpected reply %v", name, reply)
	}
	states, _ := res[1].(string)
	if len(states) != 1+groups {
		return "", 0, fmt.Errorf("script %s: %d states for %d groups", name, len(states), groups)
	}
	var due int64
	if len(res) > 2 {
		due = asInt(res[2])
	}
	return states, due, nil
}

// keyStatus is the reply of status.lua for one group.
type keyStatus struct {
	state   byte  // see status.lua
	timeUs  int64 // due time or lease deadline, Unix µs
	attempt int64
	record  string // history record, when state is 'h'
}

// status runs status.lua and returns whether a message has key, its due time in the parked set
// (-1 if not parked), and each group's status, in the order of groups.
func (s store) status(ctx context.Context, part, key string, groups []string) (bool, int64, []keyStatus, error) {
	tk := s.keys.topic(part)
	keys, args := s.byKeyTarget(part, key, publishCall{}, []string{tk.messages, tk.parked, tk.history}, nil, groups, false)
	reply, err := s.run(ctx, s.client, statusScript, keys, args...)
	if err != nil {
		return false, 0, nil, err
	}
	res, _ := reply.([]any)
	if len(res) != 2+4*len(groups) {
		return false, 0, nil, fmt.Errorf("script %s: unexpected reply of %d values for %d groups", statusScript.name, len(res), len(groups))
	}
	out := make([]keyStatus, len(groups))
	for i := range out {
		r := res[2+4*i:]
		state, _ := r[0].(string)
		record, _ := r[3].(string)
		if len(state) != 1 {
			return false, 0, nil, fmt.Errorf("script %s: unexpected state %v", statusScript.name, r[0])
		}
		out[i] = keyStatus{state: state[0], timeUs: asInt(r[1]), attempt: asInt(r[2]), record: record}
	}
	return asInt(res[0]) == 1, asInt(res[1]), out, nil
}

// registerTopic records topic and its partition count in the topic registry (HSET), for the
// Inspector.
func (s store) registerTopic(ctx context.Context, topic string, partitions int) error {
	_, err := bounded(ctx, s.contextTimeouts, func(ctx context.Context) (int64, error) {
		return s.client.HSet(ctx, s.keys.topicRegistry(), topic, partitions).Result()
	})
	if err != nil {
		return classify(err)
	}
	return nil
}

// setPaused runs pause.lua. It returns whether the flag changed, or an error wrapping
// ErrNotFound when the group is not registered.
func (s store) setPaused(ctx context.Context, part, group string, paused bool) (bool, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	flag := 0
	if paused {
		flag = 1
	}
	res, err := s.run(ctx, s.client, pauseScript, []string{tk.groups, gk.paused}, group, flag, gk.wakeChannel)
	if err != nil {
		return false, err
	}
	switch n, _ := res.(int64); n {
	case -1:
		return false, fmt.Errorf("consumer group %s: %w", quote(group), ErrNotFound)
	case 0, 1:
		return n == 1, nil
	}
	return false, fmt.Errorf("script %s: unexpected reply %v", pauseScript.name, res)
}

// removeGroup runs removegroup.lua once: the first step (first) unregisters the group and
// moves what it holds to the removal's keys, every step drops up to limit of those messages.
// It returns whether this call unregistered the group, how many messages it dropped and how
// many are left.
func (s store) removeGroup(ctx context.Context, part, group string, first bool, limit int) (bool, int64, int64, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	op := "drain"
	if first {
		op = "remove"
	}
	keys := []string{tk.groups, tk.messages, tk.refs, gk.due, gk.lease, gk.keyed, gk.paused, tk.history, gk.epoch, gk.removedDue, gk.removedLease, tk.batches, tk.parked, tk.window, tk.removedParked}
	res, err := s.run(ctx, s.client, removeGroupScript, keys, group, limit, op, gk.wakeChannel)
	if err != nil {
		return false, 0, 0, err
	}
	r, _ := res.([]any)
	if len(r) != 3 {
		return false, 0, 0, fmt.Errorf("script %s: unexpected reply %v", removeGroupScript.name, res)
	}
	return asInt(r[0]) == 1, asInt(r[1]), asInt(r[2]), nil
}

// groupCounts is what stats.lua returns for one group of one partition.
type groupCounts struct {
	nowUs, due, scheduled, inFlight, dead, headUs, nextDueUs int64
	paused                                                   bool
}

// stats runs stats.lua for the groups of a topic partition; deadParts are the partitions of
// their dead-letter topics, in the same order.
func (s store) stats(ctx context.Context, part string, groups, deadParts []string) ([]groupCounts, error) {
	keys := make([]string, 0, 4*len(groups))
	for n, g := range groups {
		gk := s.keys.group(part, g)
		keys = append(keys, gk.due, gk.lease, gk.paused, s.keys.topic(deadParts[n]).parked)
	}
	res, err := s.run(ctx, s.client, statsScript, keys)
	if err != nil {
		return nil, err
	}
	r, _ := res.([]any)
	if len(r) != 1+7*len(groups) {
		return nil, fmt.Errorf("script %s: unexpected reply of %d values for %d groups", statsScript.name, len(r), len(groups))
	}
	out := make([]groupCounts, len(groups))
	for n := range out {
		v := r[1+7*n:]
		out[n] = groupCounts{nowUs: asInt(r[0]), due: asInt(v[0]), scheduled: asInt(v[1]), inFlight: asInt(v[2]), dead: asInt(v[3]), headUs: asInt(v[4]), nextDueUs: asInt(v[5]), paused: asInt(v[6]) == 1}
	}
	return out, nil
}

// listed is one message of a list.lua or show.lua reply.
type listed struct {
	// member is the member's name, or for a member that holds its message (ID|message) its
	// short form "ID|" (see lua/lib/position.lua).
	member  string
	scoreUs int64
	size    int    // of the stored message in bytes, -1 when it has vanished
	data    []byte // its first bytes (list.lua) or all of it (show.lua); nil when vanished
	leased  bool   // show.lua: found in the lease set
}

// list runs list.lua on set (part "due", "scheduled" or "all") after the cursor (its score,
// first true for the first page, and member): at most limit messages, prefix bytes of each,
// and no more stored messages than budget bytes after the first. It returns the page, the
// Redis time, and whether the page ended for the budget.
func (s store) list(ctx context.Context, set, messages, part string, cursorUs int64, cursorMember string, first bool, limit, prefix, budget int) ([]listed, int64, bool, error) {
	cursor := ""
	if !first {
		cursor = strconv.FormatInt(cursorUs, 10)
	}
	res, err := s.run(ctx, s.client, listScript, []string{set, messages}, part, cursor, cursorMember, limit, prefix, budget)
	if err != nil {
		return nil, 0, false, err
	}
	r, _ := res.([]any)
	if len(r) < 2 || (len(r)-2)%4 != 0 {
		return nil, 0, false, fmt.Errorf("script %s: unexpected reply of %d values", listScript.name, len(r))
	}
	out := make([]listed, 0, (len(r)-2)/4)
	for i := 2; i < len(r); i += 4 {
		m, _ := r[i].(string)
		l := listed{member: m, scoreUs: asInt(r[i+1]), size: int(asInt(r[i+2]))}
		if d, ok := r[i+3].(string); ok && l.size >= 0 {
			l.data = []byte(d)
		} else {
			l.size = -1
		}
		out = append(out, l)
	}
	return out, asInt(r[0]), asInt(r[1]) == 1, nil
}

// show runs show.lua: the message named member in due or lease, or when short the member of
// due whose short form is member and whose score is scoreUs. ok is false when neither holds
// it. The listed member is the whole member.
func (s store) show(ctx context.Context, due, lease, messages, member string, short bool, scoreUs int64) (listed, int64, bool, error) {
	score := ""
	if short {
		score = strconv.FormatInt(scoreUs, 10)
	}
	res, err := s.run(ctx, s.client, showScript, []string{due, lease, messages}, member, score)
	if err != nil {
		return listed{}, 0, false, err
	}
	r, _ := res.([]any)
	if len(r) == 1 {
		return listed{}, asInt(r[0]), false, nil
	}
	if len(r) != 5 {
		return listed{}, 0, false, fmt.Errorf("script %s: unexpected reply %v", showScript.name, res)
	}
	where, _ := r[1].(string)
	whole, _ := r[4].(string)
	l := listed{member: whole, scoreUs: asInt(r[2]), leased: where == "lease", size: -1}
	if d, ok := r[3].(string); ok {
		l.data, l.size = []byte(d), len(d)
	}
	return l, asInt(r[0]), true, nil
}

// resolve runs resolve.lua on set: the whole member of each short form (shorts[i], scored
// scoresUs[i]), "" where the set holds none.
func (s store) resolve(ctx context.Context, set string, shorts []string, scoresUs []int64) ([]string, error) {
	args := make([]any, 0, 2*len(shorts))
	for i, m := range shorts {
		args = append(args, m, scoresUs[i])
	}
	res, err := s.run(ctx, s.client, resolveScript, []string{set}, args...)
	if err != nil {
		return nil, err
	}
	r, _ := res.([]any)
	if len(r) != len(shorts) {
		return nil, fmt.Errorf("script %s: unexpected reply of %d values for %d", resolveScript.name, len(r), len(shorts))
	}
	out := make([]string, len(r))
	for i, v := range r {
		out[i], _ = v.(string)
	}
	return out, nil
}

// purge runs purge.lua once on set: it drops up to limit messages of the part ("due",
// "scheduled" or "all") for the group, closing the batches it drops, and returns how many it
// dropped and how many are left. It returns an error wrapping ErrNotFound, having changed
// nothing, when the group is not registered on the topic partition.
func (s store) purge(ctx context.Context, part, group, set, which string, limit int) (int64, int64, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	res, err := s.run(ctx, s.client, purgeScript, []string{set, tk.messages, tk.refs, gk.keyed, tk.history, tk.groups, tk.batches}, which, limit, group)
	if err != nil {
		return 0, 0, err
	}
	if n, ok := res.(int64); ok && n == -1 {
		return 0, 0, fmt.Errorf("consumer group %s: %w", quote(group), ErrNotFound)
	}
	r, _ := res.([]any)
	if len(r) != 2 {
		return 0, 0, fmt.Errorf("script %s: unexpected reply %v", purgeScript.name, res)
	}
	return asInt(r[0]), asInt(r[1]), nil
}

// requeue runs requeue.lua: members of the parked set of the dead-letter topic partition
// deadPart go back to group on the topic partition part, due at once, without a key. Each keyed
// member's history key on the dead-letter topic goes in KEYS, so that the script touches no
// other key. It returns how many were requeued; on an error (ErrNotFound wrapped when the group
// is not registered, or a Redis error such as a key of the wrong type) nothing changed.
func (s store) requeue(ctx context.Context, part, group, deadPart string, members []string) (int64, error) {
	tk, gk, dk := s.keys.topic(part), s.keys.group(part, group), s.keys.topic(deadPart)
	keys := []string{dk.parked, dk.messages, dk.refs, tk.seq, tk.messages, gk.due, tk.groups}
	args := make([]any, 0, 3+2*len(members))
	args = append(args, group, gk.wakeChannel, dk.history)
	for _, m := range members {
		at := 0
		if key, ok := keyOfID(memberID(m)); ok {
			keys = append(keys, dk.history+key)
			at = len(keys)
		}
		args = append(args, m, at)
	}
	res, err := s.run(ctx, s.client, requeueScript, keys, args...)
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	switch {
	case !ok || n < -1:
		return 0, fmt.Errorf("script %s: unexpected reply %v", requeueScript.name, res)
	case n == -1:
		return 0, fmt.Errorf("consumer group %s: %w", quote(group), ErrNotFound)
	}
	return n, nil
}

// keyedID returns the member under which group holds the keyed message with key on a topic
// partition: the one its keyed hash names once it claimed it, else the never-claimed ID:0 of the
// message the key's field holds. It returns an error wrapping ErrNotFound when no message has
// the key. (Two reads, not atomic: the member may have moved on by the time it is used.)
func (s store) keyedID(ctx context.Context, part, group, key string) (string, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	return bounded(ctx, s.contextTimeouts, func(ctx context.Context) (string, error) {
		if m, err := s.client.HGet(ctx, gk.keyed, key).Result(); err == nil {
			return m, nil
		} else if !errors.Is(err, redis.Nil) {
			return "", classify(err)
		}
		v, err := s.client.HGet(ctx, tk.messages, "="+key).Result()
		if errors.Is(err, redis.Nil) || err == nil && len(v) < 12 {
			return "", fmt.Errorf("key %s: %w", quote(key), ErrNotFound)
		} else if err != nil {
			return "", classify(err)
		}
		return v[:12] + "=" + key + ":0", nil
	})
}

// refOp runs refop.lua: op is "cancel" or "reschedule" (to m's schedule) for the message named
// member in group; either closes the batch it names if that batch is still open. It returns the
// state letter and the new due time (µs, -1 if unchanged), or an error wrapping ErrNotFound,
// with nothing written, when group is not registered on the partition.
func (s store) refOp(ctx context.Context, part, group, op, member string, call publishCall, m outgoing) (string, int64, error) {
	tk, gk := s.keys.topic(part), s.keys.group(part, group)
	keys := []string{s.keys.call(part, call.token), gk.due, gk.lease, tk.messages, tk.refs, gk.keyed, tk.history, tk.groups, tk.batches}
	res, err := s.run(ctx, s.client, refOpScript, keys, call.ttl.Milliseconds(), op, member, group, m.scheduleArg(), gk.wakeChannel)
	if err != nil {
		return "", 0, err
	}
	r, _ := res.([]any)
	if len(r) != 2 {
		return "", 0, fmt.Errorf("script %s: unexpected reply %v", refOpScript.name, res)
	}
	state, _ := r[0].(string)
	switch state {
	case "g":
		return "", 0, fmt.Errorf("consumer group %s: %w", quote(group), ErrNotFound)
	case "d", "i", "n":
		return state, asInt(r[1]), nil
	}
	return "", 0, fmt.Errorf("script %s: unexpected reply %v", refOpScript.name, res)
}

// batchOp runs flushbatch.lua (op "flush" or "cancel") and returns the items of the batch.
func (s store) batchOp(ctx context.Context, part string, call publishCall, op, bk string, groups []string) (int, error) {
	tk := s.keys.topic(part)
	keys := []string{s.keys.call(part, call.token), tk.messages, tk.refs, tk.groups, tk.parked, tk.batches, tk.history}
	args := []any{call.ttl.Milliseconds(), op, bk, len(groups)}
	for _, g := range groups {
		keys = append(keys, s.keys.group(part, g).due)
		args = append(args, g)
	}
	for _, g := range groups {
		args = append(args, s.keys.group(part, g).wakeChannel)
	}
	res, err := s.run(ctx, s.client, flushBatchScript, keys, args...)
	if err != nil {
		return 0, err
	}
	r, _ := res.([]any)
	if len(r) > 0 {
		if code, _ := r[0].(int64); code == 0 {
			return 0, &staleGroupsError{groups: asStrings(r[1:])}
		}
	}
	if len(r) != 2 {
		return 0, fmt.Errorf("script %s: unexpected reply %v", flushBatchScript.name, res)
	}
	return int(asInt(r[1])), nil
}

package redisdelay

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// store is the only code that talks to Redis about the queue's data: every script has one Go
// wrapper here, and every key comes from keySpace.
type store struct {
	client redis.UniversalClient
	keys   keySpace
	// durableReplicas, when > 0, makes publish WAIT for that many replicas, durableTimeout at
	// most.
	durableReplicas int
	durableTimeout  time.Duration
}

var (
	//go:embed lua/lib.lua
	luaLib string
	//go:embed lua/publish.lua
	luaPublish string
	//go:embed lua/claim.lua
	luaClaim string
	//go:embed lua/ack.lua
	luaAck string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/nack.lua
	luaNack string
	//go:embed lua/extend.lua
	luaExtend string
	//go:embed lua/deadletter.lua
	luaDeadLetter string

	// Each script is loaded once per server and then run with EVALSHA (redis.Script falls back
	// to EVAL on NOSCRIPT, for example after a restart).
	publishScript    = newScript(luaPublish)
	claimScript      = newScript(luaClaim)
	ackScript        = newScript(luaAck)
	releaseScript    = newScript(luaRelease)
	nackScript       = newScript(luaNack)
	extendScript     = newScript(luaExtend)
	deadLetterScript = newScript(luaDeadLetter)
)

func newScript(body string) *redis.Script {
	return redis.NewScript(luaLib + "\n" + body)
}

// stored is a message ready to be published: its marshaled form and when it is due, either
// delay after the Redis clock at publish time or, when at is set, at that instant.
type stored struct {
	data  []byte
	delay time.Duration
	at    time.Time
}

// scheduleArg encodes when a message is due for publish_to in lib.lua: a delay in µs, or "@"
// and a Unix time in µs.
func (m stored) scheduleArg() any {
	if !m.at.IsZero() {
		return "@" + strconv.FormatInt(m.at.UnixMicro(), 10)
	}
	return m.delay.Microseconds()
}

// errStaleGroups means the caller's view of a topic's consumer groups was out of date; groups
// are the ones registered now.
type errStaleGroups struct{ groups []string }

func (errStaleGroups) Error() string { return "registered consumer groups changed" }

// errLeaseLost means a script refused an operation because the caller's lease had expired and
// the message had been claimed again (fencing).
var errLeaseLost = errors.New("lease lost")

// publishTarget appends the keys and arguments that publish_to in lib.lua expects for a topic:
// its keys, then the expected group count, the groups, their wake channels and the messages.
func (s store) publishTarget(keys []string, args []any, topic string, expected int, groups []string, msgs []stored) ([]string, []any) {
	tk := s.keys.topic(topic)
	keys = append(keys, tk.seq, tk.messages, tk.refs, tk.groups)
	args = append(args, expected, len(groups))
	channels := make([]any, 0, len(groups))
	for _, g := range groups {
		gk := s.keys.group(topic, g)
		keys = append(keys, gk.due)
		args = append(args, g)
		channels = append(channels, gk.wakeChannel)
	}
	args = append(args, channels...)
	for _, m := range msgs {
		args = append(args, m.data, m.scheduleArg())
	}
	return keys, args
}

// publishReply reads the reply of publish_to: nil, *errStaleGroups or errLeaseLost.
func publishReply(res []any) error {
	if len(res) == 0 {
		return errors.New("empty reply from script")
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		return nil
	case -1:
		return errLeaseLost
	}
	stale := &errStaleGroups{}
	for _, g := range res[1:] {
		name, _ := g.(string)
		stale.groups = append(stale.groups, name)
	}
	return stale
}

// publish runs publish.lua for one batch, scheduled for the given groups. expected is how many
// groups the caller believes are registered (0 means none: groups must then be just the default
// group, which the script registers). It returns *errStaleGroups with the current groups when
// that belief is wrong; nothing is stored then.
func (s store) publish(ctx context.Context, topic string, expected int, groups []string, msgs []stored) error {
	keys, args := s.publishTarget(make([]string, 0, 4+len(groups)), make([]any, 0, 2+2*len(groups)+2*len(msgs)), topic, expected, groups, msgs)
	if s.durableReplicas > 0 {
		return s.publishDurably(ctx, keys, args)
	}
	res, err := bounded(ctx, func(ctx context.Context) ([]any, error) {
		return publishScript.Run(ctx, s.client, keys, args...).Slice()
	})
	if err != nil {
		return err
	}
	return publishReply(res)
}

// publishDurably runs publish.lua and then WAIT on one connection to the master that owns the
// keys, since WAIT counts the replicas that have that connection's writes.
func (s store) publishDurably(ctx context.Context, keys []string, args []any) error {
	_, err := bounded(ctx, func(ctx context.Context) (struct{}, error) {
		var conn *redis.Conn
		switch c := s.client.(type) {
		case *redis.ClusterClient:
			master, err := c.MasterForKey(ctx, keys[0])
			if err != nil {
				return struct{}{}, err
			}
			conn = master.Conn()
		case *redis.Client:
			conn = c.Conn()
		default:
			return struct{}{}, fmt.Errorf("DurableReplicas needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
		}
		defer conn.Close()
		res, err := publishScript.Run(ctx, conn, keys, args...).Slice()
		if err == nil {
			err = publishReply(res)
		}
		if err != nil {
			return struct{}{}, err
		}
		replicas, err := conn.Do(ctx, "WAIT", s.durableReplicas, s.durableTimeout.Milliseconds()).Int64()
		if err == nil && replicas < int64(s.durableReplicas) {
			err = fmt.Errorf("%w: %d of %d replicas within %s", ErrNotDurable, replicas, s.durableReplicas, s.durableTimeout)
		}
		return struct{}{}, err
	})
	return err
}

// deadLetter runs deadletter.lua: it publishes letter to the dead-letter topic for the given
// groups and ends the source group's hold on c, atomically. It returns errLeaseLost or
// *errStaleGroups when nothing was changed.
func (s store) deadLetter(ctx context.Context, topic, group string, c *claimed, deadLetterTopic string, expected int, groups []string, letter []byte) error {
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	keys := []string{gk.lease, tk.messages, tk.refs}
	args := []any{c.member()}
	keys, args = s.publishTarget(keys, args, deadLetterTopic, expected, groups, []stored{{data: letter}})
	res, err := bounded(ctx, func(ctx context.Context) ([]any, error) {
		return deadLetterScript.Run(ctx, s.client, keys, args...).Slice()
	})
	if err != nil {
		return err
	}
	return publishReply(res)
}

// bounded runs f and returns when it does or when ctx is done, whichever comes first. go-redis
// bounds a call by its own dial and socket timeouts, and honours a context deadline only with
// ContextTimeoutEnabled; bounded makes OperationTimeout hold in any case. A call abandoned this
// way finishes in the background and may still take effect: every script is atomic, so it takes
// effect whole or not at all.
func bounded[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
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

// registerGroup adds a consumer group to a topic (SADD). From then on every message published
// to the topic is scheduled for the group too.
func (s store) registerGroup(ctx context.Context, topic, group string) error {
	_, err := bounded(ctx, func(ctx context.Context) (int64, error) {
		return s.client.SAdd(ctx, s.keys.topic(topic).groups, group).Result()
	})
	return err
}

// claimed is one message a subscription holds a lease on.
type claimed struct {
	id        string
	attempt   int64
	dueUs     int64  // due time, Unix µs on the Redis clock
	data      []byte // the stored message
	uuid      string // the message UUID, once decoded, for logs
	delivered bool   // handed to the application
}

// member is the message's name in the lease sorted set, ID:attempt: the lease's fencing token.
func (c *claimed) member() string { return c.id + ":" + strconv.FormatInt(c.attempt, 10) }

// claimResult is what one claim call returns.
type claimResult struct {
	nowUs       int64    // Redis clock when the script ran, Unix µs
	nextDueUs   int64    // earliest due time left in the group, -1 if none
	nextLeaseUs int64    // earliest lease deadline in the group, -1 if none
	refusedAcks []string // IDs whose ack was refused: the lease had been lost
	vanished    int64
	messages    []*claimed
}

// claim runs claim.lua: it acknowledges acks, then claims up to limit due messages.
func (s store) claim(ctx context.Context, topic, group string, limit int, lease time.Duration, acks []*claimed) (claimResult, error) {
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	args := make([]any, 0, 2+len(acks))
	args = append(args, limit, lease.Microseconds())
	for _, a := range acks {
		args = append(args, a.member())
	}
	res, err := bounded(ctx, func(ctx context.Context) ([]any, error) {
		return claimScript.Run(ctx, s.client, []string{gk.due, gk.lease, tk.messages, tk.refs}, args...).Slice()
	})
	if err != nil {
		return claimResult{}, err
	}
	if len(res) < 5 || (len(res)-5)%4 != 0 {
		return claimResult{}, fmt.Errorf("claim script returned %d values", len(res))
	}
	r := claimResult{
		nowUs:       asInt(res[0]),
		nextDueUs:   asInt(res[1]),
		nextLeaseUs: asInt(res[2]),
		refusedAcks: asStrings(res[3]),
		vanished:    asInt(res[4]),
	}
	for i := 5; i < len(res); i += 4 {
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
func (s store) ack(ctx context.Context, topic, group string, acks []*claimed) ([]string, error) {
	if len(acks) == 0 {
		return nil, nil
	}
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	args := make([]any, 0, len(acks))
	for _, a := range acks {
		args = append(args, a.member())
	}
	return bounded(ctx, func(ctx context.Context) ([]string, error) {
		return ackScript.Run(ctx, s.client, []string{gk.lease, tk.messages, tk.refs}, args...).StringSlice()
	})
}

// release runs release.lua for messages a stopping subscription still holds.
func (s store) release(ctx context.Context, topic, group string, held []*claimed) error {
	if len(held) == 0 {
		return nil
	}
	gk := s.keys.group(topic, group)
	args := make([]any, 0, 1+3*len(held))
	args = append(args, gk.wakeChannel)
	for _, c := range held {
		delivered := 0
		if c.delivered {
			delivered = 1
		}
		args = append(args, c.member(), c.dueUs, delivered)
	}
	_, err := bounded(ctx, func(ctx context.Context) (any, error) {
		return releaseScript.Run(ctx, s.client, []string{gk.due, gk.lease}, args...).Result()
	})
	return err
}

// nack runs nack.lua. changed is the re-marshaled message when the consumer modified it, else
// nil. It returns errLeaseLost when the lease had been lost.
func (s store) nack(ctx context.Context, topic, group string, c *claimed, delay time.Duration, changed []byte) error {
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	args := []any{c.member(), delay.Microseconds(), gk.wakeChannel}
	if changed != nil {
		args = append(args, changed)
	}
	score, err := bounded(ctx, func(ctx context.Context) (int64, error) {
		return nackScript.Run(ctx, s.client, []string{gk.due, gk.lease, tk.messages, tk.refs, tk.seq}, args...).Int64()
	})
	if err == nil && score < 0 {
		return errLeaseLost
	}
	return err
}

// extend runs extend.lua and returns the IDs whose lease had been lost.
func (s store) extend(ctx context.Context, topic, group string, lease time.Duration, held []*claimed) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	gk := s.keys.group(topic, group)
	args := make([]any, 0, 1+len(held))
	args = append(args, lease.Microseconds())
	for _, c := range held {
		args = append(args, c.member())
	}
	return bounded(ctx, func(ctx context.Context) ([]string, error) {
		return extendScript.Run(ctx, s.client, []string{gk.lease}, args...).StringSlice()
	})
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

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

	// Each script is loaded once per server and then run with EVALSHA (redis.Script falls back
	// to EVAL on NOSCRIPT, for example after a restart).
	publishScript = newScript(luaPublish)
	claimScript   = newScript(luaClaim)
	ackScript     = newScript(luaAck)
	releaseScript = newScript(luaRelease)
	nackScript    = newScript(luaNack)
	extendScript  = newScript(luaExtend)
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

// scheduleArg encodes when a message is due for publish.lua: a delay in µs, or "@" and a Unix
// time in µs.
func (m stored) scheduleArg() any {
	if !m.at.IsZero() {
		return "@" + strconv.FormatInt(m.at.UnixMicro(), 10)
	}
	return m.delay.Microseconds()
}

// errStaleGroups means the publisher's view of a topic's consumer groups was out of date.
type errStaleGroups struct{ groups []string }

func (errStaleGroups) Error() string { return "registered consumer groups changed" }

// publish runs publish.lua for one batch, scheduled for the given groups. expected is how many
// groups the caller believes are registered (0 means none: groups must then be just the default
// group, which the script registers). It returns *errStaleGroups with the current groups when
// that belief is wrong.
func (s store) publish(ctx context.Context, topic string, expected int, groups []string, msgs []stored) error {
	tk := s.keys.topic(topic)
	keys := make([]string, 0, 4+len(groups))
	keys = append(keys, tk.seq, tk.messages, tk.refs, tk.groups)
	args := make([]any, 0, 2+2*len(groups)+2*len(msgs))
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
	res, err := publishScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return err
	}
	if len(res) == 0 {
		return errors.New("empty reply from publish script")
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	stale := &errStaleGroups{}
	for _, g := range res[1:] {
		name, _ := g.(string)
		stale.groups = append(stale.groups, name)
	}
	return stale
}

// registerGroup adds a consumer group to a topic (SADD). From then on every message published
// to the topic is scheduled for the group too.
func (s store) registerGroup(ctx context.Context, topic, group string) error {
	return s.client.SAdd(ctx, s.keys.topic(topic).groups, group).Err()
}

// claimed is one message a subscription holds a lease on.
type claimed struct {
	id        string
	attempt   int64
	dueUs     int64  // due time, Unix µs on the Redis clock
	data      []byte // nil once decoded or when the stored message vanished
	delivered bool   // handed to the application
}

// token is the (ID, attempt) pair that fences a lease.
func (c *claimed) token() []any { return []any{c.id, c.attempt} }

// claimResult is what one claim call returns.
type claimResult struct {
	nowUs       int64 // Redis clock when the script ran, Unix µs
	nextDueUs   int64 // earliest due time left in the group, -1 if none
	nextLeaseUs int64 // earliest lease deadline in the group, -1 if none
	refusedAcks int64
	vanished    int64
	messages    []*claimed
}

// claim runs claim.lua: it acknowledges acks, then claims up to limit due messages.
func (s store) claim(ctx context.Context, topic, group string, limit int, lease time.Duration, acks []*claimed) (claimResult, error) {
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	args := make([]any, 0, 3+2*len(acks))
	args = append(args, limit, lease.Microseconds(), len(acks))
	for _, a := range acks {
		args = append(args, a.token()...)
	}
	res, err := claimScript.Run(ctx, s.client, []string{gk.due, gk.lease, gk.attempts, tk.messages, tk.refs}, args...).Slice()
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
		refusedAcks: asInt(res[3]),
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

// ack runs ack.lua and returns how many acks were refused because their lease had been lost.
func (s store) ack(ctx context.Context, topic, group string, acks []*claimed) (int, error) {
	if len(acks) == 0 {
		return 0, nil
	}
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	args := make([]any, 0, 2*len(acks))
	for _, a := range acks {
		args = append(args, a.token()...)
	}
	refused, err := ackScript.Run(ctx, s.client, []string{gk.lease, gk.attempts, tk.messages, tk.refs}, args...).Slice()
	return len(refused), err
}

// release runs release.lua for messages a stopping subscription still holds.
func (s store) release(ctx context.Context, topic, group string, held []*claimed) error {
	if len(held) == 0 {
		return nil
	}
	gk := s.keys.group(topic, group)
	args := make([]any, 0, 1+4*len(held))
	args = append(args, gk.wakeChannel)
	for _, c := range held {
		delivered := 0
		if c.delivered {
			delivered = 1
		}
		args = append(args, c.id, c.attempt, c.dueUs, delivered)
	}
	return releaseScript.Run(ctx, s.client, []string{gk.due, gk.lease, gk.attempts}, args...).Err()
}

// nack runs nack.lua. changed is the re-marshaled message when the consumer modified it, else
// nil. It returns false when the lease had been lost.
func (s store) nack(ctx context.Context, topic, group string, c *claimed, delay time.Duration, changed []byte) (bool, error) {
	tk, gk := s.keys.topic(topic), s.keys.group(topic, group)
	args := []any{c.id, c.attempt, delay.Microseconds(), gk.wakeChannel}
	if changed != nil {
		args = append(args, changed)
	}
	score, err := nackScript.Run(ctx, s.client, []string{gk.due, gk.lease, gk.attempts, tk.messages, tk.refs, tk.seq}, args...).Int64()
	return score >= 0, err
}

// extend runs extend.lua and returns the IDs whose lease had been lost.
func (s store) extend(ctx context.Context, topic, group string, lease time.Duration, held []*claimed) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	gk := s.keys.group(topic, group)
	args := make([]any, 0, 1+2*len(held))
	args = append(args, lease.Microseconds())
	for _, c := range held {
		args = append(args, c.token()...)
	}
	return extendScript.Run(ctx, s.client, []string{gk.lease, gk.attempts}, args...).StringSlice()
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

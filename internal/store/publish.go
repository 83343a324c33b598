package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// publish.go owns storing messages: publish.lua for a batch, with WAIT when the owner asks for
// replicas, how a message's schedule and key travel to the script, and what the script says it
// did with each message.

// Outgoing is a message ready to be stored: its marshaled form and when it is due, either Delay
// after the Redis clock at publish time, but no later than Latest when Latest is set, or, when
// At is set, at that instant.
type Outgoing struct {
	Data   []byte
	Delay  time.Duration
	At     time.Time
	Latest time.Time
	// From, when set, is the instant on the client's real clock that Delay counts from (when
	// Publish was called): the time the message then waited for its script call, a group
	// commit round, is taken off Delay when the call is sent, so that it is due Delay after
	// From rather than after the script's run. It is never early: the script runs after the
	// call is sent, and its clock has moved on at least as much. Zero keeps Delay whole (a
	// virtual clock, whose time does not pass with the real one).
	From time.Time
	// KeySpec is "" for a message without a key, else what KeySpec or BatchSpec returns.
	KeySpec string
}

// scheduleArg encodes when m is due for publish_to: a delay in µs; "@" and a Unix time in µs;
// or a delay in µs, "<" and the latest due time as a Unix time in µs. sent is when the script
// call's arguments are built, one instant for the whole call, so that messages of one Publish
// with the same delay stay due at the same time (in publish order).
func (m Outgoing) scheduleArg(sent time.Time) any {
	switch {
	case !m.At.IsZero():
		return "@" + strconv.FormatInt(m.At.UnixMicro(), 10)
	case !m.Latest.IsZero():
		return strconv.FormatInt(m.delayLeft(sent).Microseconds(), 10) + "<" + strconv.FormatInt(m.Latest.UnixMicro(), 10)
	}
	return m.delayLeft(sent).Microseconds()
}

// delayLeft is what is left of Delay at sent (see From), never below 0.
func (m Outgoing) delayLeft(sent time.Time) time.Duration {
	if m.From.IsZero() || m.Delay <= 0 {
		return m.Delay
	}
	return max(m.Delay-sent.Sub(m.From), 0)
}

// The duplicate policies of a keyed message, as publish_to reads them (see KeySpec).
const (
	KeepExisting    = "k"
	ReplaceExisting = "r"
	KeepEarlier     = "<"
	KeepLater       = ">"
)

// KeySpec returns the key spec of a keyed message for publish_to: its duplicate policy (one of
// KeepExisting, ReplaceExisting, KeepEarlier, KeepLater), the history retention in ms, with a
// max wait of at least 1 µs "/" and the max wait in µs (publish_to reads it with KeepLater
// only), "=" and the key.
func KeySpec(policy string, retention, maxWait time.Duration, key string) string {
	spec := policy + strconv.FormatInt(retention.Milliseconds(), 10)
	if us := maxWait.Microseconds(); us > 0 {
		spec += "/" + strconv.FormatInt(us, 10)
	}
	return spec + "=" + key
}

// BatchSpec returns the key spec of an item of the batch with key batchKey for publish_to: "B",
// then the batch's most items, its longest wait in µs and its most bytes, "=" and the key.
func BatchSpec(maxItems int, maxWait time.Duration, maxBytes int, batchKey string) string {
	return "B" + strconv.Itoa(maxItems) + " " + strconv.FormatInt(maxWait.Microseconds(), 10) + " " + strconv.Itoa(maxBytes) + "=" + batchKey
}

// Outcome is what a script did with one message in one place: Publish with each message
// (Scheduled, Duplicate, Replaced), the operations by key or ref in each consumer group and in
// the parked set (NotFound, Applied, InFlight, Finished).
type Outcome int

const (
	// Scheduled: stored and scheduled.
	Scheduled Outcome = iota + 1
	// Duplicate: the message's key was taken; nothing was stored.
	Duplicate
	// Replaced: it replaced the message that had its key.
	Replaced
	// NotFound: no message has the key or ref there.
	NotFound
	// Applied: the operation took effect there.
	Applied
	// InFlight: a consumer of the group holds the message.
	InFlight
	// Finished: the group no longer holds the message.
	Finished
)

// PublishOutcome decodes the outcome of message i of a Publish call from the letters it
// returned.
func PublishOutcome(letters string, i int) Outcome {
	switch letters[i] {
	case 'd':
		return Duplicate
	case 'r':
		return Replaced
	}
	return Scheduled
}

// Call names one run of a script that must not act twice: its token, and how long Redis keeps
// the token after the first run (ms precision), within which a second run acts no more.
type Call struct {
	Token string
	TTL   time.Duration
	// NotAfterUs, when not 0, fences a publishing call: run after this Unix time in µs on the
	// Redis clock, it stores nothing and returns ErrTooLate (see publish_to).
	NotAfterUs int64
	// Horizon, when positive, is the compact tier's horizon (µs precision): a message without
	// a key that falls due in a time bucket of this width which moves to the due set no
	// earlier than now (so at least one horizon ahead) waits in the compact tier (see
	// lua/lib/far.lua). At most MaxHorizon. Sent only with a call that has a message which may
	// go there (see ttlArg).
	Horizon time.Duration
}

// MaxHorizon is the longest compact-tier horizon: a bucket entry's 5-byte offset holds 2^40 µs.
const MaxHorizon = 12 * 24 * time.Hour

// ttlArg is the call's first publish_to argument: its TTL in ms, with its horizon and fence.
// The horizon goes only with a call that has a message which may reach the compact tier (see
// mayGoFar): reading it costs publish_to about 2 % of a call, which every other call saves.
func (c Call) ttlArg(msgs []Outgoing, sent time.Time) any {
	horizon := min(c.Horizon, MaxHorizon)
	if horizon > 0 && !slices.ContainsFunc(msgs, func(m Outgoing) bool { return m.mayGoFar(horizon, sent) }) {
		horizon = 0
	}
	if c.NotAfterUs == 0 && horizon <= 0 {
		return c.TTL.Milliseconds()
	}
	arg := strconv.FormatInt(c.TTL.Milliseconds(), 10)
	if horizon > 0 {
		arg += ">" + strconv.FormatInt(horizon.Microseconds(), 10)
	}
	if c.NotAfterUs != 0 {
		arg += "<" + strconv.FormatInt(c.NotAfterUs, 10)
	}
	return arg
}

// mayGoFar reports whether m may wait in the compact tier of horizon, its schedule built at
// sent (see scheduleArg): publish_to takes a message whose time bucket, of width horizon,
// moves to the due set no earlier than now, so at least horizon after now, and a delay shorter
// than horizon (whole µs, as sent) never reaches that. A due time given as a time of the
// client's clock (At) may, whatever it is: the Redis clock decides.
func (m Outgoing) mayGoFar(horizon time.Duration, sent time.Time) bool {
	return m.KeySpec == "" && (!m.At.IsZero() || m.delayLeft(sent).Microseconds() >= horizon.Microseconds())
}

// NewToken returns a random token of 16 characters that names one publish or claim call, so
// that a second run of the call is recognised.
func NewToken() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// publishTarget appends to cmd, a command begun by newCommand with the caller's keys, the keys
// that publish_to expects for partition p (the call key, the topic's, the groups' due sets and
// keyed hashes, their compact-tier indexes and epochs), then args, the caller's arguments, then
// publish_to's: the call key lifetime with the horizon and fence, the groups, their wake
// channels and the messages. It returns cmd and how many keys it holds. The keys and group
// names are interface values kept with the key names (see topicKeys.published), so that a
// publish call boxes only its call key and its messages.
func (s Store) publishTarget(cmd, args []any, p Partition, call Call, groups []string, msgs []Outgoing) ([]any, int) {
	tk := s.keys.topic(p)
	var buf [4]groupKeys
	gks := buf[:0]
	for _, g := range groups {
		gks = append(gks, s.keys.group(p.Of(g)))
	}
	cmd = append(cmd, s.keys.call(p, call.Token))
	cmd = append(cmd, tk.published...)
	for _, gk := range gks {
		cmd = append(cmd, gk.boxed.due)
	}
	for _, gk := range gks {
		cmd = append(cmd, gk.boxed.keyed)
	}
	for _, gk := range gks {
		cmd = append(cmd, gk.boxed.far)
	}
	for _, gk := range gks {
		cmd = append(cmd, gk.boxed.epoch)
	}
	nkeys := len(cmd) - commandHead
	sent := time.Now()
	cmd = append(cmd, args...)
	cmd = append(cmd, call.ttlArg(msgs, sent), len(groups))
	for _, gk := range gks {
		cmd = append(cmd, gk.boxed.name)
	}
	for _, gk := range gks {
		cmd = append(cmd, gk.boxed.wakeChannel)
	}
	for _, m := range msgs {
		cmd = append(cmd, m.Data, m.scheduleArg(sent), m.KeySpec)
	}
	return cmd, nkeys
}

// groupTargets appends the per-group keys and arguments that publish_to and the scripts by key
// share: to keys, the groups' due sets, their lease sets (with leases), then their keyed
// hashes; to args, the number of groups, their names and (with wake) their wake channels.
func (s Store) groupTargets(keys []string, args []any, p Partition, groups []string, leases, wake bool) ([]string, []any) {
	gks := make([]groupKeys, len(groups))
	args = append(args, len(groups))
	for i, g := range groups {
		gks[i] = s.keys.group(p.Of(g))
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

// publishReply reads the reply of publish.lua or deadletter.lua: its outcome letters (one per
// message, see publish_to; publish.lua returns them alone, deadletter.lua in publish_to's {1,
// first ID, outcomes}), or *StaleGroupsError, ErrTooLate or ErrLeaseLost. Any other reply is an
// error naming the script.
func publishReply(sc *script, reply any) (string, error) {
	if outcomes, ok := reply.(string); ok {
		return outcomes, nil
	}
	res, _ := reply.([]any)
	if len(res) == 0 {
		return "", unexpected(sc, reply)
	}
	switch code, _ := res[0].(int64); code {
	case 1: // publish_to's own reply, which deadletter.lua returns
		if outcomes, ok := res[len(res)-1].(string); ok && len(res) == 3 {
			return outcomes, nil
		}
	case -1:
		return "", ErrLeaseLost
	case -2:
		return "", ErrTooLate
	case 0:
		stale := &StaleGroupsError{}
		for _, g := range res[1:] {
			name, _ := g.(string)
			stale.Groups = append(stale.Groups, name)
		}
		return "", stale
	}
	return "", unexpected(sc, reply)
}

// Publish runs publish.lua for one batch on partition p, scheduled for the given groups (none:
// parked for the first group that registers), and returns the outcome letter of each message
// (see PublishOutcome). It returns *StaleGroupsError with the current groups when the caller's
// view is wrong; nothing is stored then. A second run of the same call stores nothing and
// returns the first run's outcomes. With DurableReplicas, see publishDurably.
func (s Store) Publish(ctx context.Context, p Partition, call Call, groups []string, msgs []Outgoing) (string, error) {
	cmd, nkeys := s.publishTarget(newCommand(10+6*len(groups)+2+3*len(msgs)), nil, p, call, groups, msgs)
	if s.opts.DurableReplicas > 0 {
		return s.publishDurably(ctx, nkeys, cmd)
	}
	res, err := s.eval(ctx, s.client, publishScript, nkeys, cmd)
	if err != nil {
		return "", err
	}
	return publishReply(publishScript, res)
}

// publishDurably runs publish.lua and then WAIT on one connection to the master that owns the
// keys, since WAIT counts the replicas that have that connection's writes. Once the script ran,
// the messages are stored, so every failure of WAIT (too few replicas, a lost connection, the
// end of ctx) wraps ErrNotDurable.
func (s Store) publishDurably(ctx context.Context, nkeys int, cmd []any) (string, error) {
	connect, ok := masterConn(s.client)
	if !ok {
		return "", fmt.Errorf("DurableReplicas needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
	}
	conn, err := bounded(ctx, s.contextTimeouts || s.direct, func(ctx context.Context) (*redis.Conn, error) { return connect(ctx, cmd[commandHead].(string)) })
	if err != nil {
		return "", err
	}
	defer conn.Close()
	res, err := s.eval(ctx, conn, publishScript, nkeys, cmd)
	var outcomes string
	if err == nil {
		outcomes, err = publishReply(publishScript, res)
	}
	if err != nil {
		return "", err
	}
	replicas, err := bounded(ctx, s.contextTimeouts || s.direct, func(ctx context.Context) (int64, error) {
		return conn.Do(ctx, "WAIT", s.opts.DurableReplicas, s.opts.DurableTimeout.Milliseconds()).Int64()
	})
	switch {
	case err != nil:
		return outcomes, fmt.Errorf("%w: stored, but WAIT failed: %w", ErrNotDurable, err)
	case replicas < int64(s.opts.DurableReplicas):
		return outcomes, fmt.Errorf("%w: %d of %d replicas within %s", ErrNotDurable, replicas, s.opts.DurableReplicas, s.opts.DurableTimeout)
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

// CanWaitForReplicas reports whether Publish can WAIT for replicas (Options.DurableReplicas)
// over client: it needs a connection of its own to a master, which *redis.Client and
// *redis.ClusterClient give.
func CanWaitForReplicas(client redis.UniversalClient) bool {
	_, ok := masterConn(client)
	return ok
}

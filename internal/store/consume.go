package store

import (
	"context"
	"fmt"
	"time"
)

// consume.go owns what a consumer does with its group's messages: register the group, claim,
// ack, nack, extend, release, dead-letter, and drop what a closed new-group window left.

// Lease names a message a subscription holds: its ID and the attempt it was claimed for, which
// together are the lease's fencing token (see Member).
type Lease struct {
	ID      string
	Attempt int64
}

// member is the lease's member in the lease set, its fencing token.
func (l Lease) member() string { return Member(l.ID, l.Attempt) }

// Claimed is one message a claim leased.
type Claimed struct {
	Lease
	DueUs int64  // due time, Unix µs on the Redis clock
	Data  []byte // the stored message
}

// Held is a lease a stopping subscription gives back (see Store.Release).
type Held struct {
	Lease
	DueUs int64 // due time, Unix µs on the Redis clock, which it gets back
	// Delivered is set once the message was handed to the application: its attempt counts.
	Delivered bool
}

// ClaimCall names one claim: the subscription, whose claim record holds its last claim, and
// the claim's token, so that a claim whose reply was lost is answered again.
type ClaimCall struct {
	Subscription, Token string
	// Ahead is how long before its due time (Redis clock) a message without a key may be
	// claimed, so that the subscription holds it when it falls due instead of asking Redis
	// then; zero claims only what is due. A keyed message is never claimed ahead (see
	// claim.lua). Microseconds are kept.
	Ahead time.Duration
}

// ClaimResult is what one claim call returns.
type ClaimResult struct {
	NowUs       int64    // Redis clock when the script ran (as it ended with an Ahead), Unix µs
	NextClaimUs int64    // when to claim next, Unix µs, Redis clock, -1 if never (see claim.lua)
	NextLeaseUs int64    // earliest lease deadline in the group, -1 if none
	RefusedAcks []string // IDs whose ack was refused: the lease had been lost
	Dropped     int64    // due entries dropped: malformed, or their stored message vanished
	Expired     int64    // leases that had expired and were made due again
	// ClaimedUs is the Redis clock of the claim that leased Messages, Unix µs: NowUs, or for a
	// claim answered again from its record (its reply was lost), the time of the claim that
	// ran. Deliver-by deadlines are checked against it.
	ClaimedUs int64
	Messages  []Claimed
}

// How a group finished with a keyed message, as its history records it (see ended.lua).
const (
	finishedAcked        = "acked"
	finishedDeadLettered = "dead-lettered"
	finishedCancelled    = "cancelled"
)

// RegisterGroup registers group g (register.lua) and returns its epoch (see register.lua).
// From then on every message published to the partition is scheduled for the group too; the
// first group of a partition also receives the messages published before any group was
// registered, and opens the new-group window for window (0: none), within which every group
// that registers receives the messages the window keeps, windowMax at most. It writes nothing
// when the group is registered already. It also returns how much of the window is left on the
// Redis clock (ms precision), or -1 when no window is open.
func (s Store) RegisterGroup(ctx context.Context, g Group, window time.Duration, windowMax int) (string, time.Duration, error) {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	keys := []string{tk.groups, tk.parked, gk.due, tk.window, tk.refs, tk.messages, tk.history, tk.seq, gk.epoch}
	res, err := s.run(ctx, s.client, registerScript, keys, g.Name, gk.wakeChannel, window.Milliseconds(), windowMax)
	if err != nil {
		return "", 0, err
	}
	r, _ := res.([]any)
	if len(r) != 3 {
		return "", 0, unexpected(registerScript, res)
	}
	epoch, _ := r[2].(string)
	if code, ok := r[0].(int64); !ok || code < 0 || code > 2 || epoch == "" {
		return "", 0, unexpected(registerScript, res)
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

// CloseWindowLimit is how many members of a closed window's parked set one CloseWindow call
// drops.
const CloseWindowLimit = 1000

// CloseWindow runs closewindow.lua once on partition p: when its new-group window has closed,
// it drops up to CloseWindowLimit members of what the window left in the parked set. It
// returns how many are left, and how much of the window is left (-1 when it is closed).
func (s Store) CloseWindow(ctx context.Context, p Partition) (int64, time.Duration, error) {
	tk := s.keys.topic(p)
	res, err := s.run(ctx, s.client, closeWindowScript, []string{tk.groups, tk.parked, tk.window, tk.messages, tk.refs, tk.history}, CloseWindowLimit)
	if err != nil {
		return 0, 0, err
	}
	r, _ := res.([]any)
	if len(r) != 2 {
		return 0, 0, unexpected(closeWindowScript, res)
	}
	return asInt(r[0]), windowLeft(r[1]), nil
}

// Claim runs claim.lua: it acknowledges acks, then claims up to limit due messages for group g
// registered as epoch (and messages without a key due within call.Ahead), leased for lease,
// closing each claimed batch that was still its batch
// key's open batch. A claim whose token the record holds already ran; it is answered again
// from the record. It returns an error wrapping ErrGroupRemoved when the group's epoch
// changed because the group was removed, and one wrapping ErrRegistrationLost when Redis lost
// the registration with its data (see born_after in lua/lib/next_ids.lua); nothing was acked
// or claimed then.
func (s Store) Claim(ctx context.Context, g Group, epoch string, call ClaimCall, limit int, lease time.Duration, acks []Lease) (ClaimResult, error) {
	gk := s.keys.group(g)
	const nkeys = len(groupBoxed{}.claimBefore) + 1 + len(groupBoxed{}.claimAfter)
	cmd := newCommand(nkeys + 6 + len(acks))
	cmd = append(cmd, gk.boxed.claimBefore[:]...)
	cmd = append(cmd, s.keys.claimRecord(g, call.Subscription))
	cmd = append(cmd, gk.boxed.claimAfter[:]...)
	cmd = append(cmd, limit, lease.Microseconds(), call.Token, gk.boxed.name, epoch, call.Ahead.Microseconds())
	for _, a := range acks {
		cmd = append(cmd, a.member())
	}
	reply, err := s.eval(ctx, s.client, claimScript, nkeys, cmd)
	if err != nil {
		return ClaimResult{}, err
	}
	res, _ := reply.([]any)
	if len(res) == 1 && asInt(res[0]) == -1 {
		return ClaimResult{}, fmt.Errorf("consumer group %s on %s: %w", Quote(g.Name), Quote(g.name()), ErrGroupRemoved)
	}
	if len(res) == 1 && asInt(res[0]) == -2 {
		return ClaimResult{}, fmt.Errorf("consumer group %s on %s, epoch %s: %w", Quote(g.Name), Quote(g.name()), epoch, ErrRegistrationLost)
	}
	return claimReply(res)
}

// claimReply reads the reply of claim.lua: seven values, then four per claimed message.
func claimReply(res []any) (ClaimResult, error) {
	if len(res) < 7 || (len(res)-7)%4 != 0 {
		return ClaimResult{}, fmt.Errorf("script %s: unexpected reply of %d values", claimScript.name, len(res))
	}
	r := ClaimResult{
		NowUs:       asInt(res[0]),
		NextClaimUs: asInt(res[1]),
		NextLeaseUs: asInt(res[2]),
		RefusedAcks: asStrings(res[3]),
		Dropped:     asInt(res[4]),
		Expired:     asInt(res[5]),
		ClaimedUs:   asInt(res[6]),
	}
	if len(res) > 7 {
		r.Messages = make([]Claimed, 0, (len(res)-7)/4)
	}
	for i := 7; i < len(res); i += 4 {
		id, _ := res[i].(string)
		data, _ := res[i+3].(string)
		r.Messages = append(r.Messages, Claimed{
			Lease: Lease{ID: id, Attempt: asInt(res[i+1])},
			DueUs: asInt(res[i+2]),
			Data:  []byte(data),
		})
	}
	return r, nil
}

// Ack runs ack.lua for the leases acks that group g's claims gave in its registration epoch,
// and returns the IDs whose ack was refused because their lease had been lost, or because the
// group is no longer registered as epoch (see lease_marker in lua/lib).
func (s Store) Ack(ctx context.Context, g Group, epoch string, acks []Lease) ([]string, error) {
	return s.finish(ctx, g, epoch, finishedAcked, "", acks)
}

// finish runs ack.lua, recording outcome and reason in the history of keyed messages (see
// ended.lua), and returns the IDs whose lease (of epoch) had been lost.
func (s Store) finish(ctx context.Context, g Group, epoch, outcome, reason string, acks []Lease) ([]string, error) {
	if len(acks) == 0 {
		return nil, nil
	}
	gk := s.keys.group(g)
	cmd := newCommand(len(gk.boxed.ack) + 4 + len(acks))
	cmd = append(cmd, gk.boxed.ack[:]...)
	cmd = append(cmd, gk.boxed.name, outcome, reason, epoch)
	for _, a := range acks {
		cmd = append(cmd, a.member())
	}
	res, err := s.eval(ctx, s.client, ackScript, len(gk.boxed.ack), cmd)
	if err != nil {
		return nil, err
	}
	return asStrings(res), nil
}

// Release runs release.lua for the messages a stopping subscription of group g still holds,
// and for the messages of its last claim when that claim's reply did not arrive (call.Token is
// then that claim's token, else empty). Only leases of the group's registration epoch are
// released (see lease_marker in lua/lib).
func (s Store) Release(ctx context.Context, g Group, epoch string, call ClaimCall, held []Held) error {
	if len(held) == 0 && call.Token == "" {
		return nil
	}
	gk := s.keys.group(g)
	args := make([]any, 0, 3+3*len(held))
	args = append(args, gk.wakeChannel, call.Token, epoch)
	for _, h := range held {
		delivered := 0
		if h.Delivered {
			delivered = 1
		}
		args = append(args, h.member(), h.DueUs, delivered)
	}
	_, err := s.run(ctx, s.client, releaseScript, []string{gk.due, gk.lease, s.keys.claimRecord(g, call.Subscription), gk.keyed}, args...)
	return err
}

// Nack runs nack.lua: l's message is due again after delay in group g. changed is the
// re-marshaled message when the consumer modified it, else nil. It returns ErrLeaseLost when
// the lease had been lost, or the group is no longer registered as epoch, the registration
// the lease was claimed in.
func (s Store) Nack(ctx context.Context, g Group, epoch string, l Lease, delay time.Duration, changed []byte) error {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	args := []any{l.member(), delay.Microseconds(), gk.wakeChannel, epoch}
	if changed != nil {
		args = append(args, changed)
	}
	res, err := s.run(ctx, s.client, nackScript, []string{gk.due, gk.lease, tk.messages, tk.refs, tk.seq, tk.history}, args...)
	if err != nil {
		return err
	}
	if score, ok := res.(int64); !ok {
		return unexpected(nackScript, res)
	} else if score < 0 {
		return ErrLeaseLost
	}
	return nil
}

// Extend runs extend.lua: the leases held in group g, claimed in its registration epoch, last
// lease from now. It returns the IDs whose lease had been lost, every one when the group is no
// longer registered as epoch.
func (s Store) Extend(ctx context.Context, g Group, epoch string, lease time.Duration, held []Lease) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	gk := s.keys.group(g)
	args := make([]any, 0, 2+len(held))
	args = append(args, lease.Microseconds(), epoch)
	for _, l := range held {
		args = append(args, l.member())
	}
	res, err := s.run(ctx, s.client, extendScript, []string{gk.lease}, args...)
	if err != nil {
		return nil, err
	}
	return asStrings(res), nil
}

// deadLetterTokenTTL is how long the token of a dead letter moved to another hash slot is kept:
// while it is, a move that runs again (its second step failed, or the consumer died between
// the steps and the message came back) publishes nothing more.
const deadLetterTokenTTL = 7 * 24 * time.Hour

// DeadLetter publishes letter to the dead-letter partition dead for its groups and ends group
// g's hold on l. When both partitions share a hash slot it is one call of deadletter.lua. Else
// it takes two steps that can each run again without harm, after a check that l is still
// leased (extend.lua, which also gives the steps a full lease of lease): publish.lua with a
// token derived from the message (so a repeated first step publishes nothing more), then
// ack.lua, fenced by the lease and the group's registration epoch. It returns ErrLeaseLost or
// *StaleGroupsError when nothing was changed.
func (s Store) DeadLetter(ctx context.Context, g Group, epoch string, l Lease, reason string, dead Partition, groups []string, letter []byte, lease time.Duration) error {
	call := Call{Token: "dl:" + g.name() + ":" + g.Name + ":" + l.ID, TTL: deadLetterTokenTTL}
	msgs := []Outgoing{{Data: letter}}
	if !s.keys.sameSlot(g.Partition, dead) {
		return s.deadLetterAcross(ctx, g, epoch, l, reason, dead, call, groups, msgs, lease)
	}
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	cmd, nkeys := s.publishTarget(newCommand(0, gk.lease, tk.messages, tk.refs, gk.keyed, tk.history), []any{l.member(), g.Name, reason, epoch}, dead, call, groups, msgs)
	res, err := s.eval(ctx, s.client, deadLetterScript, nkeys, cmd)
	if err != nil {
		return err
	}
	_, err = publishReply(deadLetterScript, res)
	return err
}

// deadLetterAcross is DeadLetter to a partition in another hash slot, in its two steps.
func (s Store) deadLetterAcross(ctx context.Context, g Group, epoch string, l Lease, reason string, dead Partition, call Call, groups []string, msgs []Outgoing, lease time.Duration) error {
	lost, err := s.Extend(ctx, g, epoch, lease, []Lease{l})
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return ErrLeaseLost
	}
	cmd, nkeys := s.publishTarget(newCommand(0), nil, dead, call, groups, msgs)
	res, err := s.eval(ctx, s.client, deadLetterPublishScript, nkeys, cmd)
	if err == nil {
		_, err = publishReply(deadLetterPublishScript, res)
	}
	if err != nil {
		return err
	}
	refused, err := s.finish(ctx, g, epoch, finishedDeadLettered, reason, []Lease{l})
	if err == nil && len(refused) > 0 {
		err = ErrLeaseLost
	}
	return err
}

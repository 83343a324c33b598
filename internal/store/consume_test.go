package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// TestStaleLeaseHolderIsFencedOut checks every script's fencing: once a lease expired and
// another consumer claimed the message, the old holder's ack, nack, extension, release and
// dead-lettering are refused and leave the new holder's lease alone.
func TestStaleLeaseHolderIsFencedOut(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		const topic, group = "fencing", testGroup
		part := Partition{Topic: topic}
		g := part.Of(group)
		data := []byte("m")
		epoch, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		_, err = s.Publish(ctx, part, testCall(), []string{group}, []Outgoing{{Data: data}})
		require.NoError(t, err)

		const lease = 100 * time.Millisecond
		before := time.Now()
		a, err := s.Claim(ctx, g, epoch, testClaim(), 10, lease, nil)
		require.NoError(t, err)
		require.Len(t, a.Messages, 1)
		stale := a.Messages[0]
		require.EqualValues(t, 1, stale.Attempt)

		var b ClaimResult
		require.Eventually(t, func() bool {
			b, err = s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
			require.NoError(t, err)
			return len(b.Messages) == 1
		}, 5*time.Second, 5*time.Millisecond, "the expired lease makes the message due again")
		require.GreaterOrEqual(t, time.Since(before), lease, "claimed again before its lease expired")
		current := b.Messages[0]
		require.EqualValues(t, 2, current.Attempt)
		gk := s.keys.group(g)
		leaseOf := func() float64 { return client.ZScore(ctx, gk.lease, current.member()).Val() }
		deadline := leaseOf()
		require.NotZero(t, deadline)

		refused, err := s.Ack(ctx, g, epoch, []Lease{stale.Lease})
		require.NoError(t, err)
		assert.Equal(t, []string{stale.ID}, refused, "stale ack")
		assert.ErrorIs(t, s.Nack(ctx, g, epoch, stale.Lease, 0, nil), ErrLeaseLost, "stale nack")
		lost, err := s.Extend(ctx, g, epoch, time.Hour, []Lease{stale.Lease})
		require.NoError(t, err)
		assert.Equal(t, []string{stale.ID}, lost, "stale extension")
		require.NoError(t, s.Release(ctx, g, epoch, ClaimCall{Subscription: "none"}, []Held{{Lease: stale.Lease, DueUs: stale.DueUs}}))
		assert.ErrorIs(t, s.DeadLetter(ctx, g, epoch, stale.Lease, "nacked", Partition{Topic: topic + DeadLetterInfix + group}, nil, data, lease), ErrLeaseLost, "stale dead-lettering")
		assert.ErrorIs(t, s.DeadLetter(ctx, g, epoch, stale.Lease, "nacked", Partition{Topic: "elsewhere"}, nil, data, lease), ErrLeaseLost, "stale dead-lettering to another slot")

		assert.Equal(t, deadline, leaseOf(), "the new holder's lease is untouched")
		assert.Zero(t, client.ZCard(ctx, gk.due).Val(), "nothing went back to the due set")
		for _, dlt := range []string{topic + DeadLetterInfix + group, "elsewhere"} {
			assert.Zero(t, client.ZCard(ctx, s.keys.topic(Partition{Topic: dlt}).parked).Val(), "no dead letter on %s", dlt)
		}

		refused, err = s.Ack(ctx, g, epoch, []Lease{current.Lease})
		require.NoError(t, err)
		assert.Empty(t, refused)
		assert.Zero(t, client.HLen(ctx, s.keys.topic(part).messages).Val(), "acked by the holder, the message is gone")
	})
}

// leasesOf returns the leases of claimed messages.
func leasesOf(claimed []Claimed) []Lease {
	out := make([]Lease, len(claimed))
	for i, c := range claimed {
		out[i] = c.Lease
	}
	return out
}

// testGroup is the consumer group the tests use.
const testGroup = "default"

// testStore returns a store on client with a test prefix.
func testStore(client redis.UniversalClient) Store {
	return New(client, "test:", Options{})
}

// testCall names a new publish call.
func testCall() Call { return Call{Token: NewToken(), TTL: time.Minute} }

// testClaim names a new claim of a new subscription.
func testClaim() ClaimCall { return ClaimCall{Subscription: NewToken(), Token: NewToken()} }

// TestClaimRunAgainIsAnsweredFromTheRecord checks the claim token: a claim that runs again
// (its reply was lost) returns the same messages at the same attempt and claims nothing more,
// and a release naming the token gives them back without counting the attempt.
func TestClaimRunAgainIsAnsweredFromTheRecord(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		const topic, group = "replay", testGroup
		part := Partition{Topic: topic}
		g := part.Of(group)
		epoch, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		var msgs []Outgoing
		for _, id := range []string{"a", "b", "c"} {
			data := []byte(id)
			msgs = append(msgs, Outgoing{Data: data})
		}
		_, err = s.Publish(ctx, part, testCall(), []string{group}, msgs)
		require.NoError(t, err)

		call := testClaim()
		first, err := s.Claim(ctx, g, epoch, call, 2, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, first.Messages, 2)
		again, err := s.Claim(ctx, g, epoch, call, 2, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, again.Messages, 2, "the same claim is answered again")
		assert.Equal(t, first.NowUs, first.ClaimedUs)
		assert.Equal(t, first.ClaimedUs, again.ClaimedUs, "the answer again gives the time of the claim that ran")
		for i := range first.Messages {
			assert.Equal(t, first.Messages[i].ID, again.Messages[i].ID)
			assert.Equal(t, first.Messages[i].Attempt, again.Messages[i].Attempt)
			assert.Equal(t, first.Messages[i].Data, again.Messages[i].Data)
		}
		gk := s.keys.group(g)
		assert.EqualValues(t, 1, client.ZCard(ctx, gk.due).Val(), "the run again claimed nothing more")
		assert.EqualValues(t, 2, client.ZCount(ctx, gk.lease, "-inf", "(1e300").Val())

		require.NoError(t, s.Release(ctx, g, epoch, call, nil))
		assert.Zero(t, client.ZCount(ctx, gk.lease, "-inf", "(1e300").Val(), "the lost claim's messages are released")
		next, err := s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, next.Messages, 3)
		for _, c := range next.Messages {
			assert.EqualValues(t, 1, c.Attempt, "a released claim that never reached the consumer costs no attempt")
		}
	})
}

// forStoreBackends runs f as a subtest against miniredis and a throwaway redis-server.
func forStoreBackends(t *testing.T, f func(t *testing.T, client *redis.Client)) {
	mr := miniredis.RunT(t)
	for name, addr := range map[string]string{"miniredis": mr.Addr(), "redis": redistest.Start(t, redistest.Options{}).Addr} {
		t.Run(name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: addr})
			defer client.Close()
			f(t, client)
		})
	}
}

// TestRegistrationDuringARemovalIsKeptAndStartsEmpty: the removal's first step moves the
// group's messages aside and ends its epoch; a registration between the removal's steps gets a
// new epoch and an empty group, which the later steps leave registered, while a claim that
// names the old epoch is refused.
func TestRegistrationDuringARemovalIsKeptAndStartsEmpty(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		const topic, group = "reregister", testGroup
		part := Partition{Topic: topic}
		g := part.Of(group)
		old, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		var msgs []Outgoing
		for i := range 25 {
			data := []byte("old" + strconv.Itoa(i))
			msgs = append(msgs, Outgoing{Data: data})
		}
		_, err = s.Publish(ctx, part, testCall(), []string{group}, msgs)
		require.NoError(t, err)
		claimed, err := s.Claim(ctx, g, old, testClaim(), 5, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, claimed.Messages, 5)

		removed, dropped, left, err := s.RemoveGroup(ctx, g, true, 10)
		require.NoError(t, err)
		assert.True(t, removed)
		assert.EqualValues(t, 10, dropped)
		assert.EqualValues(t, 15, left)

		fresh, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		assert.NotEqual(t, old, fresh, "a registration after a removal is a new epoch")
		data := []byte("new")
		_, err = s.Publish(ctx, part, testCall(), []string{group}, []Outgoing{{Data: data}})
		require.NoError(t, err)
		for left > 0 {
			removed, _, left, err = s.RemoveGroup(ctx, g, false, 10)
			require.NoError(t, err)
			assert.False(t, removed, "a later step never unregisters")
		}
		assert.True(t, client.SIsMember(ctx, s.keys.topic(part).groups, group).Val(), "the new registration stands")

		_, err = s.Claim(ctx, g, old, testClaim(), 10, time.Minute, leasesOf(claimed.Messages))
		assert.ErrorIs(t, err, ErrGroupRemoved, "a claim of the old epoch")
		got, err := s.Claim(ctx, g, fresh, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, got.Messages, 1, "the new registration holds only what was published after it")
		assert.Equal(t, "new", string(got.Messages[0].Data))
		refused, err := s.Ack(ctx, g, old, leasesOf(claimed.Messages))
		require.NoError(t, err)
		assert.Len(t, refused, 5, "acks of the removed group's leases are refused")
	})
}

package redisdelay

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

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// TestStaleLeaseHolderIsFencedOut checks every script's fencing: once a lease expired and
// another consumer claimed the message, the old holder's ack, nack, extension, release and
// dead-lettering are refused and leave the new holder's lease alone.
func TestStaleLeaseHolderIsFencedOut(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		const topic, group = "fencing", DefaultConsumerGroup
		part := store.Partition{Topic: topic}
		g := part.Of(group)
		data, _ := DefaultMarshalerUnmarshaler{}.Marshal(topic, messageWithUUID("m"))
		epoch, _, err := s.registerGroup(ctx, g, 0)
		require.NoError(t, err)
		_, err = s.publish(ctx, part, testCall(), []string{group}, []outgoing{{data: data}})
		require.NoError(t, err)

		const lease = 100 * time.Millisecond
		a, err := s.claim(ctx, g, epoch, testClaim(), 10, lease, nil)
		require.NoError(t, err)
		require.Len(t, a.messages, 1)
		stale := a.messages[0]
		require.EqualValues(t, 1, stale.attempt)

		time.Sleep(lease + 20*time.Millisecond)
		b, err := s.claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, b.messages, 1, "the expired lease makes the message due again")
		current := b.messages[0]
		require.EqualValues(t, 2, current.attempt)
		gk := s.keys.group(g)
		leaseOf := func() float64 { return client.ZScore(ctx, gk.lease, current.member()).Val() }
		deadline := leaseOf()
		require.NotZero(t, deadline)

		refused, err := s.ack(ctx, g, []*claimed{stale})
		require.NoError(t, err)
		assert.Equal(t, []string{stale.id}, refused, "stale ack")
		assert.ErrorIs(t, s.nack(ctx, g, stale, 0, nil), store.ErrLeaseLost, "stale nack")
		lost, err := s.extend(ctx, g, time.Hour, []*claimed{stale})
		require.NoError(t, err)
		assert.Equal(t, []string{stale.id}, lost, "stale extension")
		require.NoError(t, s.release(ctx, g, claimCall{subscription: "none"}, []*claimed{stale}))
		assert.ErrorIs(t, s.deadLetter(ctx, g, stale, DeadLetterReasonNacked, store.Partition{Topic: DefaultDeadLetterTopic(topic, group)}, nil, data, lease), store.ErrLeaseLost, "stale dead-lettering")
		assert.ErrorIs(t, s.deadLetter(ctx, g, stale, DeadLetterReasonNacked, store.Partition{Topic: "elsewhere"}, nil, data, lease), store.ErrLeaseLost, "stale dead-lettering to another slot")

		assert.Equal(t, deadline, leaseOf(), "the new holder's lease is untouched")
		assert.Zero(t, client.ZCard(ctx, gk.due).Val(), "nothing went back to the due set")
		for _, dlt := range []string{DefaultDeadLetterTopic(topic, group), "elsewhere"} {
			assert.Zero(t, client.ZCard(ctx, s.keys.topic(store.Partition{Topic: dlt}).parked).Val(), "no dead letter on %s", dlt)
		}

		refused, err = s.ack(ctx, g, []*claimed{current})
		require.NoError(t, err)
		assert.Empty(t, refused)
		assert.Zero(t, client.HLen(ctx, s.keys.topic(part).messages).Val(), "acked by the holder, the message is gone")
	})
}

// testStore returns a store on client with the default prefix.
func testStore(client redis.UniversalClient) redisStore {
	return newStore(client, DefaultKeyPrefix, storeOptions{})
}

// testCall names a new publish call.
func testCall() publishCall { return publishCall{token: newToken(), ttl: time.Minute} }

// testClaim names a new claim of a new subscription.
func testClaim() claimCall { return claimCall{subscription: newToken(), token: newToken()} }

// TestClaimRunAgainIsAnsweredFromTheRecord checks the claim token: a claim that runs again
// (its reply was lost) returns the same messages at the same attempt and claims nothing more,
// and a release naming the token gives them back without counting the attempt.
func TestClaimRunAgainIsAnsweredFromTheRecord(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		const topic, group = "replay", DefaultConsumerGroup
		part := store.Partition{Topic: topic}
		g := part.Of(group)
		epoch, _, err := s.registerGroup(ctx, g, 0)
		require.NoError(t, err)
		var msgs []outgoing
		for _, id := range []string{"a", "b", "c"} {
			data, _ := DefaultMarshalerUnmarshaler{}.Marshal(topic, messageWithUUID(id))
			msgs = append(msgs, outgoing{data: data})
		}
		_, err = s.publish(ctx, part, testCall(), []string{group}, msgs)
		require.NoError(t, err)

		call := testClaim()
		first, err := s.claim(ctx, g, epoch, call, 2, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, first.messages, 2)
		again, err := s.claim(ctx, g, epoch, call, 2, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, again.messages, 2, "the same claim is answered again")
		for i := range first.messages {
			assert.Equal(t, first.messages[i].id, again.messages[i].id)
			assert.Equal(t, first.messages[i].attempt, again.messages[i].attempt)
			assert.Equal(t, first.messages[i].data, again.messages[i].data)
		}
		gk := s.keys.group(g)
		assert.EqualValues(t, 1, client.ZCard(ctx, gk.due).Val(), "the run again claimed nothing more")
		assert.EqualValues(t, 2, client.ZCount(ctx, gk.lease, "-inf", "(1e300").Val())

		require.NoError(t, s.release(ctx, g, call, nil))
		assert.Zero(t, client.ZCount(ctx, gk.lease, "-inf", "(1e300").Val(), "the lost claim's messages are released")
		next, err := s.claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, next.messages, 3)
		for _, c := range next.messages {
			assert.EqualValues(t, 1, c.attempt, "a released claim that never reached the consumer costs no attempt")
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
		const topic, group = "reregister", DefaultConsumerGroup
		part := store.Partition{Topic: topic}
		g := part.Of(group)
		old, _, err := s.registerGroup(ctx, g, 0)
		require.NoError(t, err)
		var msgs []outgoing
		for i := range 25 {
			data, _ := DefaultMarshalerUnmarshaler{}.Marshal(topic, messageWithUUID("old"+strconv.Itoa(i)))
			msgs = append(msgs, outgoing{data: data})
		}
		_, err = s.publish(ctx, part, testCall(), []string{group}, msgs)
		require.NoError(t, err)
		claimed, err := s.claim(ctx, g, old, testClaim(), 5, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, claimed.messages, 5)

		removed, dropped, left, err := s.removeGroup(ctx, g, true, 10)
		require.NoError(t, err)
		assert.True(t, removed)
		assert.EqualValues(t, 10, dropped)
		assert.EqualValues(t, 15, left)

		fresh, _, err := s.registerGroup(ctx, g, 0)
		require.NoError(t, err)
		assert.NotEqual(t, old, fresh, "a registration after a removal is a new epoch")
		data, _ := DefaultMarshalerUnmarshaler{}.Marshal(topic, messageWithUUID("new"))
		_, err = s.publish(ctx, part, testCall(), []string{group}, []outgoing{{data: data}})
		require.NoError(t, err)
		for left > 0 {
			removed, _, left, err = s.removeGroup(ctx, g, false, 10)
			require.NoError(t, err)
			assert.False(t, removed, "a later step never unregisters")
		}
		assert.True(t, client.SIsMember(ctx, s.keys.topic(part).groups, group).Val(), "the new registration stands")

		_, err = s.claim(ctx, g, old, testClaim(), 10, time.Minute, claimed.messages)
		assert.ErrorIs(t, err, ErrGroupRemoved, "a claim of the old epoch")
		got, err := s.claim(ctx, g, fresh, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, got.messages, 1, "the new registration holds only what was published after it")
		m, err := DefaultMarshalerUnmarshaler{}.Unmarshal(topic, got.messages[0].data)
		require.NoError(t, err)
		assert.Equal(t, "new", m.UUID)
		refused, err := s.ack(ctx, g, claimed.messages)
		require.NoError(t, err)
		assert.Len(t, refused, 5, "acks of the removed group's leases are refused")
	})
}

package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIDsAndEpochsAfterADataLossExceedEveryEarlierOne: once Redis lost its data, the topic's ID
// counter starts again from the Redis clock, so that neither a message ID nor a group's epoch
// repeats one given before the loss.
func TestIDsAndEpochsAfterADataLossExceedEveryEarlierOne(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "counter"}
		g := part.Of(testGroup)
		before, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		oldIDs := publishN(t, s, part, 5)

		require.NoError(t, client.FlushAll(ctx).Err())
		after, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		newIDs := publishN(t, s, part, 5)

		assert.Greater(t, after, oldIDs[len(oldIDs)-1], "the epoch after the loss exceeds every earlier ID and epoch")
		assert.Greater(t, after, before)
		for _, id := range newIDs {
			assert.Greater(t, id, oldIDs[len(oldIDs)-1], "an ID after the loss exceeds every earlier one")
			assert.Len(t, id, seqDigits)
		}
	})
}

// publishN publishes n messages to part for its one group and returns their IDs, as a claim
// gives them.
func publishN(t *testing.T, s Store, part Partition, n int) []string {
	t.Helper()
	ctx := context.Background()
	msgs := make([]Outgoing, n)
	for i := range msgs {
		msgs[i] = Outgoing{Data: []byte("m" + strconv.Itoa(i))}
	}
	_, err := s.Publish(ctx, part, testCall(), []string{testGroup}, msgs)
	require.NoError(t, err)
	ids, err := s.client.ZRange(ctx, s.keys.group(part.Of(testGroup)).due, int64(-n), -1).Result()
	require.NoError(t, err)
	for i, m := range ids {
		ids[i] = memberID(m)
	}
	return ids
}

// TestAClaimTellsALostRegistrationFromARemoval: a claim naming an epoch that Redis lost with
// its data fails with ErrRegistrationLost, whether the topic has been written to again since
// or the group registered again by another subscription; a claim naming the epoch of a group
// that was removed (and maybe registered again) fails with ErrGroupRemoved.
func TestAClaimTellsALostRegistrationFromARemoval(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "loss-or-removal"}
		g := part.Of(testGroup)
		register := func() string {
			epoch, _, err := s.RegisterGroup(ctx, g, 0, 0)
			require.NoError(t, err)
			return epoch
		}
		claimErr := func(epoch string) error {
			_, err := s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
			return err
		}
		flush := func() { require.NoError(t, client.FlushAll(ctx).Err()) }

		epoch := register()
		flush()
		assert.ErrorIs(t, claimErr(epoch), ErrRegistrationLost, "nothing written since the loss")

		epoch = register()
		publishN(t, s, part, 1)
		flush()
		_, err := s.Publish(ctx, part, testCall(), nil, []Outgoing{{Data: []byte("parked")}})
		require.NoError(t, err)
		assert.ErrorIs(t, claimErr(epoch), ErrRegistrationLost, "published to since the loss")

		epoch = register()
		flush()
		again := register()
		assert.ErrorIs(t, claimErr(epoch), ErrRegistrationLost, "registered again by another subscription since the loss")
		require.NoError(t, claimErr(again))

		_, _, _, err = s.RemoveGroup(ctx, g, true, 100)
		require.NoError(t, err)
		assert.ErrorIs(t, claimErr(again), ErrGroupRemoved, "removed")
		fresh := register()
		assert.ErrorIs(t, claimErr(again), ErrGroupRemoved, "removed and registered again")
		require.NoError(t, claimErr(fresh))
	})
}

// TestALeaseOfAnEarlierEpochIsFencedOut: an ack, nack, extension, release or dead-lettering
// that names a lease claimed in an earlier registration of the group is refused and leaves the
// current registration's lease alone, even when the lease member is the same (as when IDs
// repeated after a data loss, which a counter of an older version, or one that another
// writer set, allows).
func TestALeaseOfAnEarlierEpochIsFencedOut(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		const topic = "epoch-fence"
		part := Partition{Topic: topic}
		g := part.Of(testGroup)
		seq := s.keys.topic(part).seq
		counter := func() int64 { n, err := client.Get(ctx, seq).Int64(); require.NoError(t, err); return n }
		old, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		start := counter()
		publishN(t, s, part, 1)
		a, err := s.Claim(ctx, g, old, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, a.Messages, 1)
		stale := a.Messages[0]

		// The data is lost, and the counter comes back where it was: the new registration's
		// epoch differs, its first message has the stale lease's ID again.
		require.NoError(t, client.FlushAll(ctx).Err())
		require.NoError(t, client.Set(ctx, seq, start+10, 0).Err())
		current, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		require.NotEqual(t, old, current)
		require.NoError(t, client.Set(ctx, seq, start, 0).Err())
		publishN(t, s, part, 1)
		b, err := s.Claim(ctx, g, current, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, b.Messages, 1)
		require.Equal(t, stale.member(), b.Messages[0].member(), "the same lease member in two epochs")
		lease := s.keys.group(g).lease
		deadline := client.ZScore(ctx, lease, stale.member()).Val()

		refused, err := s.Ack(ctx, g, old, []Lease{stale.Lease})
		require.NoError(t, err)
		assert.Equal(t, []string{stale.ID}, refused, "an ack of the earlier epoch")
		assert.ErrorIs(t, s.Nack(ctx, g, old, stale.Lease, 0, nil), ErrLeaseLost, "a nack of the earlier epoch")
		lost, err := s.Extend(ctx, g, old, time.Hour, []Lease{stale.Lease})
		require.NoError(t, err)
		assert.Equal(t, []string{stale.ID}, lost, "an extension of the earlier epoch")
		require.NoError(t, s.Release(ctx, g, old, ClaimCall{Subscription: "none"}, []Held{{Lease: stale.Lease, DueUs: stale.DueUs}}))
		for _, dlt := range []string{topic + DeadLetterInfix + testGroup, "elsewhere"} {
			err := s.DeadLetter(ctx, g, old, stale.Lease, "nacked", Partition{Topic: dlt}, nil, []byte("m"), time.Minute)
			assert.ErrorIs(t, err, ErrLeaseLost, "dead-lettering of the earlier epoch to %s", dlt)
		}
		assert.Equal(t, deadline, client.ZScore(ctx, lease, stale.member()).Val(), "the current lease is untouched")
		assert.Zero(t, client.ZCard(ctx, s.keys.group(g).due).Val(), "nothing went back to the due set")

		refused, err = s.Ack(ctx, g, current, leasesOf(b.Messages))
		require.NoError(t, err)
		assert.Empty(t, refused, "the current registration's ack")
		assert.Zero(t, client.HLen(ctx, s.keys.topic(part).messages).Val())
	})
}

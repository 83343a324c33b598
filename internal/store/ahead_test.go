package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAClaimAheadTakesMessagesWithoutAKeyOnly checks ClaimCall.Ahead: a claim takes a message
// without a key due within Ahead, stops at a keyed message that is not due yet (claims keep
// due-time order), and gives the next claim time as the due time less Ahead, or the keyed
// message's due time whole. A claim answered again from its record, and a release of a claim
// whose reply was lost, never make a message due earlier than it was.
func TestAClaimAheadTakesMessagesWithoutAKeyOnly(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "ahead"}
		g := part.Of(testGroup)
		epoch, _, err := s.RegisterGroup(ctx, g, 0, 0)
		require.NoError(t, err)
		_, err = s.Publish(ctx, part, testCall(), []string{testGroup}, []Outgoing{
			{Data: []byte("plain"), Delay: 10 * time.Second},
			{Data: []byte("keyed"), Delay: 20 * time.Second, KeySpec: KeySpec(KeepExisting, 0, 0, "k")},
			{Data: []byte("after"), Delay: 30 * time.Second},
		})
		require.NoError(t, err)
		gk := s.keys.group(g)
		due := map[string]int64{}
		for _, z := range client.ZRangeWithScores(ctx, gk.due, 0, -1).Val() {
			due[z.Member.(string)] = int64(z.Score)
		}
		require.Len(t, due, 3)
		keyedDue := int64(0)
		for m, d := range due {
			if _, keyed := KeyOf(m[:len(m)-2]); keyed {
				keyedDue = d
			}
		}
		require.NotZero(t, keyedDue)

		none, err := s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		assert.Empty(t, none.Messages, "without Ahead nothing is due")

		const ahead = time.Minute
		call := testClaim()
		call.Ahead = ahead
		first, err := s.Claim(ctx, g, epoch, call, 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, first.Messages, 1, "the keyed message stops the claim")
		plain := first.Messages[0]
		assert.Equal(t, "plain", string(plain.Data))
		assert.Greater(t, plain.DueUs, first.NowUs, "claimed ahead of its due time")
		assert.Equal(t, keyedDue, first.NextClaimUs, "a keyed message is claimed when due")

		again, err := s.Claim(ctx, g, epoch, call, 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, again.Messages, 1)
		assert.GreaterOrEqual(t, again.Messages[0].DueUs, plain.DueUs, "answered again: never due earlier")
		assert.GreaterOrEqual(t, again.Messages[0].DueUs, first.ClaimedUs+ahead.Microseconds())

		require.NoError(t, s.Release(ctx, g, epoch, call, nil))
		score, err := client.ZScore(ctx, gk.due, plain.ID).Result()
		require.NoError(t, err, "released under its ID, the attempt not counted")
		assert.GreaterOrEqual(t, int64(score), plain.DueUs, "a lost claim's release keeps it due no earlier")

		// With the keyed message gone, the next claim time of a message without a key is its
		// due time less Ahead.
		_, err = s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.NoError(t, client.ZRemRangeByScore(ctx, gk.due, "-inf", "+inf").Err())
		_, err = s.Publish(ctx, part, testCall(), []string{testGroup}, []Outgoing{{Data: []byte("later"), Delay: 2 * time.Hour}})
		require.NoError(t, err)
		later := client.ZRangeWithScores(ctx, gk.due, 0, 0).Val()
		require.Len(t, later, 1)
		next, err := s.Claim(ctx, g, epoch, call, 10, time.Minute, nil)
		require.NoError(t, err)
		assert.Empty(t, next.Messages)
		assert.Equal(t, int64(later[0].Score)-ahead.Microseconds(), next.NextClaimUs)
	})
}

package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// commandsRun returns how many Redis commands f made the server run, those inside scripts
// included and the script calls themselves left out, from INFO commandstats before and after.
func commandsRun(t *testing.T, client *redis.Client, f func()) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, client.ConfigResetStat(ctx).Err())
	f()
	info, err := client.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	run := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		name = strings.TrimPrefix(name, "cmdstat_")
		if !ok || name == "eval" || name == "evalsha" || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err)
		run[name] = n
	}
	return run
}

// total adds up the commands of commandsRun.
func total(run map[string]int64) int64 {
	var n int64
	for _, calls := range run {
		n += calls
	}
	return n
}

// TestKeyedMessagesCostCommandsPerCallNotPerMessage: a publish of 100 keyed messages with new
// keys reads their keys with one HMGET and their histories with one EXISTS and writes them with
// one HSET, and the ack of all 100 ends them in their group with one HDEL and one EXISTS: the
// commands a call sends do not grow with its keyed messages.
func TestKeyedMessagesCostCommandsPerCallNotPerMessage(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	s := testStore(client)
	ctx := context.Background()
	part := Partition{Topic: "keyed-calls"}
	g := part.Of(testGroup)
	epoch, _, err := s.RegisterGroup(ctx, g, -1, 0)
	require.NoError(t, err)
	msgs := make([]Outgoing, 100)
	for i := range msgs {
		msgs[i] = Outgoing{Data: []byte("m" + strconv.Itoa(i)), KeySpec: KeySpec(KeepExisting, 0, 0, "k"+strconv.Itoa(i))}
	}
	var letters string
	published := commandsRun(t, client, func() {
		letters, err = s.Publish(ctx, part, testCall(), []string{testGroup}, msgs)
		require.NoError(t, err)
	})
	assert.Equal(t, strings.Repeat("s", 100), letters)
	assert.LessOrEqual(t, total(published), int64(20), "commands of a publish of 100 keyed messages: %v", published)
	assert.EqualValues(t, 1, published["hmget"], "one read of the keys")
	assert.EqualValues(t, 100, client.HLen(ctx, s.keys.topic(part).messages).Val())

	claimed, err := s.Claim(ctx, g, epoch, testClaim(), 100, time.Minute, nil)
	require.NoError(t, err)
	require.Len(t, claimed.Messages, 100)
	acked := commandsRun(t, client, func() {
		refused, err := s.Ack(ctx, g, epoch, leasesOf(claimed.Messages))
		require.NoError(t, err)
		assert.Empty(t, refused)
	})
	assert.LessOrEqual(t, total(acked), int64(12), "commands of an ack of 100 keyed messages: %v", acked)
	assert.Zero(t, client.HLen(ctx, s.keys.topic(part).messages).Val(), "the keys are free")
	assert.Zero(t, client.HLen(ctx, s.keys.group(g).keyed).Val(), "the group holds no key")

	again, err := s.Publish(ctx, part, testCall(), []string{testGroup}, msgs)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("s", 100), again, "freed keys are stored again")
}

// TestAKeyedCallSeesEachKeyAsItsEarlierMessagesLeftIt: within one call, a message sees the
// earlier ones of its key as if they had been written already, and keys with and without a
// history mix in one call and one ack: those that keep one are recorded, expire after their
// retention and take no message while they last; the others are free again.
func TestAKeyedCallSeesEachKeyAsItsEarlierMessagesLeftIt(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "keyed-mix"}
		g := part.Of(testGroup)
		epoch, _, err := s.RegisterGroup(ctx, g, -1, 0)
		require.NoError(t, err)
		kept := func(key string) string { return KeySpec(KeepExisting, time.Hour, 0, key) }
		msgs := []Outgoing{
			{Data: []byte("a1"), KeySpec: kept("a")},
			{Data: []byte("b1"), KeySpec: KeySpec(KeepExisting, 0, 0, "b")},
			{Data: []byte("a2"), KeySpec: kept("a")},
			{Data: []byte("c1"), KeySpec: kept("c")},
			{Data: []byte("c2"), KeySpec: KeySpec(ReplaceExisting, time.Hour, 0, "c")},
			{Data: []byte("c3"), KeySpec: KeySpec(ReplaceExisting, time.Hour, 0, "c")},
		}
		letters, err := s.Publish(ctx, part, testCall(), []string{testGroup}, msgs)
		require.NoError(t, err)
		assert.Equal(t, "ssdsrr", letters)
		claimed, err := s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		data := map[string]string{}
		for _, c := range claimed.Messages {
			data[c.ID[13:]] = string(c.Data)
		}
		assert.Equal(t, map[string]string{"a": "a1", "b": "b1", "c": "c3"}, data, "the first of a, the last replacement of c")
		refused, err := s.Ack(ctx, g, epoch, leasesOf(claimed.Messages))
		require.NoError(t, err)
		assert.Empty(t, refused)

		history := s.keys.topic(part).history
		for _, key := range []string{"a", "c"} {
			record := client.HGet(ctx, history+key, testGroup).Val()
			assert.True(t, strings.HasPrefix(record, "acked "), "history of %s: %q", key, record)
			assert.Greater(t, client.PTTL(ctx, history+key).Val(), time.Duration(0), "history of %s expires", key)
		}
		assert.Zero(t, client.Exists(ctx, history+"b").Val(), "b keeps no history")
		letters, err = s.Publish(ctx, part, testCall(), []string{testGroup}, []Outgoing{
			{Data: []byte("a3"), KeySpec: kept("a")},
			{Data: []byte("b2"), KeySpec: kept("b")},
			{Data: []byte("c4"), KeySpec: kept("c")},
		})
		require.NoError(t, err)
		assert.Equal(t, "dsd", letters, "a key is taken while its history lasts")
	})
}

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

// TestAPlainCallNumbersItsMessagesInOrderPastEverySixteenthID: publish_to's short path formats
// an ID's first 11 hex digits once per 16 IDs; a call of 40 messages crosses such a boundary at
// least twice. With one group (messages in their members) and with two (messages in the hash,
// counted in refs), the claimed IDs are 12 hex digits, one apart, in the order of the call.
func TestAPlainCallNumbersItsMessagesInOrderPastEverySixteenthID(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		for _, groups := range [][]string{{"one"}, {"one", "two"}} {
			part := Partition{Topic: "plain-ids-" + strconv.Itoa(len(groups))}
			epochs := map[string]string{}
			for _, name := range groups {
				epoch, _, err := s.RegisterGroup(ctx, part.Of(name), -1, 0)
				require.NoError(t, err)
				epochs[name] = epoch
			}
			msgs := make([]Outgoing, 40)
			for i := range msgs {
				msgs[i] = Outgoing{Data: []byte("m" + strconv.Itoa(i))}
			}
			letters, err := s.Publish(ctx, part, testCall(), groups, msgs)
			require.NoError(t, err)
			assert.Equal(t, strings.Repeat("s", 40), letters)
			for _, name := range groups {
				claimed, err := s.Claim(ctx, part.Of(name), epochs[name], testClaim(), 100, time.Minute, nil)
				require.NoError(t, err)
				require.Len(t, claimed.Messages, 40, "group %s of %d", name, len(groups))
				first, err := strconv.ParseInt(claimed.Messages[0].ID, 16, 64)
				require.NoError(t, err)
				for i, c := range claimed.Messages {
					assert.Equal(t, "m"+strconv.Itoa(i), string(c.Data))
					assert.Equal(t, strconv.FormatInt(first+int64(i), 16), strings.TrimLeft(c.ID, "0"), "ID %d of group %s", i, name)
					assert.Len(t, c.ID, 12)
				}
			}
		}
	})
}

// TestAPlainCallRunsNoCommandOfAFeatureItDoesNotUse: a call of one message without a key, on a
// topic with a group and its new-group window closed, runs TIME, SCARD and SISMEMBER (the
// groups), EXISTS (the window), INCRBY (its ID), SET (its call key, NX GET: the check that it
// did not run already), ZRANGE (the head, for the wake-up) and ZADD, and a PUBLISH when it
// comes first. Run again with the same call key, it stores nothing and answers as the first
// run did.
func TestAPlainCallRunsNoCommandOfAFeatureItDoesNotUse(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	s := testStore(client)
	ctx := context.Background()
	part := Partition{Topic: "plain-commands"}
	_, _, err := s.RegisterGroup(ctx, part.Of(testGroup), -1, 0)
	require.NoError(t, err)
	require.NoError(t, client.Del(ctx, s.keys.topic(part).window).Err(), "the window closed")
	call := testCall()
	msg := []Outgoing{{Data: []byte("plain"), Delay: time.Hour}}
	run := commandsRun(t, client, func() {
		letters, err := s.Publish(ctx, part, call, []string{testGroup}, msg)
		require.NoError(t, err)
		assert.Equal(t, "s", letters)
	})
	delete(run, "publish")
	delete(run, "spublish")
	assert.Equal(t, map[string]int64{"time": 1, "scard": 1, "sismember": 1, "exists": 1, "incrby": 1, "set": 1, "zrank": 1, "zadd": 1}, run)

	due := s.keys.group(part.Of(testGroup)).due
	before := client.ZRangeWithScores(ctx, due, 0, -1).Val()
	letters, err := s.Publish(ctx, part, call, []string{testGroup}, msg)
	require.NoError(t, err)
	assert.Equal(t, "s", letters)
	assert.Equal(t, before, client.ZRangeWithScores(ctx, due, 0, -1).Val(), "the call run again stored nothing")
}

// TestAPlainCallBeforeAnyGroupParksItsMessagesOnTheShortPath: on a topic with no group yet, a
// plain call reads the clock and the groups (SMEMBERS, empty), takes its IDs, writes its call
// key and adds its messages to the parked set, embedded in their members, in one ZADD: no
// window lookup, no hash, no refs. The first group to register takes them over and receives
// them in order, the delayed one at its due time.
func TestAPlainCallBeforeAnyGroupParksItsMessagesOnTheShortPath(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	s := testStore(client)
	ctx := context.Background()
	part := Partition{Topic: "plain-parked"}
	keys := s.keys.topic(part)
	_, err := s.Publish(ctx, part, testCall(), nil, []Outgoing{{Data: []byte("first")}}) // the topic's counter starts
	require.NoError(t, err)
	msgs := []Outgoing{{Data: []byte("second")}, {Data: []byte("later"), Delay: time.Hour}, {Data: []byte("third")}}
	run := commandsRun(t, client, func() {
		letters, err := s.Publish(ctx, part, testCall(), nil, msgs)
		require.NoError(t, err)
		assert.Equal(t, "sss", letters)
	})
	assert.Equal(t, map[string]int64{"time": 1, "smembers": 1, "incrby": 1, "set": 1, "zadd": 1}, run)
	parked := client.ZRange(ctx, keys.parked, 0, -1).Val()
	require.Len(t, parked, 4)
	for i, want := range []string{"first", "second", "third", "later"} {
		assert.Equal(t, want, strings.SplitN(parked[i], "|", 2)[1], "embedded in its member")
	}
	assert.Zero(t, client.Exists(ctx, keys.messages, keys.refs).Val())

	epoch, _, err := s.RegisterGroup(ctx, part.Of(testGroup), -1, 0)
	require.NoError(t, err)
	claimed, err := s.Claim(ctx, part.Of(testGroup), epoch, testClaim(), 10, time.Minute, nil)
	require.NoError(t, err)
	require.Len(t, claimed.Messages, 3)
	for i, want := range []string{"first", "second", "third"} {
		assert.Equal(t, want, string(claimed.Messages[i].Data))
	}
	assert.Greater(t, claimed.NextClaimUs, claimed.ClaimedUs+(time.Hour-time.Second).Microseconds(), "the delayed one is due an hour on")
}

// TestAnAckOfHeldAndLostLeasesEndsOnlyTheHeldOnes: held (held.lua) scores the acked leases 0
// and counts them; when the count falls short (a lease lost, a member named twice) it reads
// which are held. An ack of two held leases, one of them twice, and a lease of an attempt
// that no longer holds its message ends the two, refuses the third, and leaves the message of
// the third leased with its deadline: no lease keeps the score 0.
func TestAnAckOfHeldAndLostLeasesEndsOnlyTheHeldOnes(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "held-and-lost"}
		g := part.Of(testGroup)
		epoch, _, err := s.RegisterGroup(ctx, g, -1, 0)
		require.NoError(t, err)
		_, err = s.Publish(ctx, part, testCall(), []string{testGroup}, []Outgoing{{Data: []byte("a")}, {Data: []byte("b")}, {Data: []byte("c")}})
		require.NoError(t, err)
		claimed, err := s.Claim(ctx, g, epoch, testClaim(), 10, time.Minute, nil)
		require.NoError(t, err)
		require.Len(t, claimed.Messages, 3)
		a, b, c := claimed.Messages[0].Lease, claimed.Messages[1].Lease, claimed.Messages[2].Lease
		lost := Lease{ID: c.ID, Attempt: c.Attempt + 1}
		lease := s.keys.group(g).lease
		deadline := client.ZScore(ctx, lease, c.member()).Val()

		refused, err := s.Ack(ctx, g, epoch, []Lease{a, lost, b, a})
		require.NoError(t, err)
		assert.Equal(t, []string{c.ID}, refused)
		left := client.ZRangeWithScores(ctx, lease, 0, -1).Val()
		require.Len(t, left, 2, "c's lease and the epoch's marker: %v", left)
		assert.Equal(t, c.member(), left[0].Member)
		assert.Equal(t, deadline, left[0].Score, "c keeps its deadline")
		assert.Equal(t, []string{"c"}, client.HVals(ctx, s.keys.topic(part).messages).Val(), "a's and b's messages are gone")

		refused, err = s.Ack(ctx, g, epoch, []Lease{c})
		require.NoError(t, err)
		assert.Empty(t, refused)
		assert.EqualValues(t, 1, client.ZCard(ctx, lease).Val(), "the marker alone")
	})
}

// TestAPlainCallWithTheWindowOpenParksItsMessagesOnTheShortPath: with the new-group window
// open and room under its cap, a plain call stays on publish_to's short path: besides a
// closed-window call's commands it runs HGET (the cap) and ZCARD (the parked set) and writes the
// parked set with a ZADD, and reads no call key with GET. On a single-group topic each small
// message is embedded in its member in both sets, at the same due time, and the messages hash
// and refs are not written; a message larger than MAX_EMBEDDED is stored once in the hash and
// held twice in refs (the group and the parked set). A message delayed by an hour is due an
// hour later in both sets. A group that registers within the window receives the messages,
// the embedded ones under IDs of its own: the first group's claims and acks do not touch them.
// A call that would take the parked set past the cap goes the long way (publish_call): it
// closes the window, parks nothing and drops what the window left, and the first group still
// receives every message.
func TestAPlainCallWithTheWindowOpenParksItsMessagesOnTheShortPath(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	s := testStore(client)
	ctx := context.Background()
	part := Partition{Topic: "plain-window"}
	keys := s.keys.topic(part)
	first := part.Of(testGroup)
	firstEpoch, _, err := s.RegisterGroup(ctx, first, time.Minute, 5)
	require.NoError(t, err)
	large := strings.Repeat("x", 1025)
	msgs := []Outgoing{{Data: []byte("now-1")}, {Data: []byte("later"), Delay: time.Hour}, {Data: []byte("now-2")}}
	run := commandsRun(t, client, func() {
		letters, err := s.Publish(ctx, part, testCall(), []string{testGroup}, msgs)
		require.NoError(t, err)
		assert.Equal(t, "sss", letters)
	})
	delete(run, "publish")
	delete(run, "spublish")
	assert.Equal(t, map[string]int64{"time": 1, "scard": 1, "sismember": 1, "exists": 1, "hget": 1, "zcard": 1,
		"incrby": 1, "set": 1, "zadd": 2, "zrank": 1}, run)

	due := client.ZRangeWithScores(ctx, s.keys.group(first).due, 0, -1).Val()
	require.Len(t, due, 3)
	assert.Equal(t, due, client.ZRangeWithScores(ctx, keys.parked, 0, -1).Val(), "parked as due")
	assert.InDelta(t, time.Hour.Microseconds(), due[2].Score-due[0].Score, float64(time.Second.Microseconds()))
	for i, want := range []string{"now-1", "now-2", "later"} {
		assert.Equal(t, "|"+want, due[i].Member.(string)[12:], "embedded after a plain ID")
	}
	assert.Zero(t, client.Exists(ctx, keys.messages, keys.refs).Val(), "nothing hashed or counted")

	_, err = s.Publish(ctx, part, testCall(), []string{testGroup}, []Outgoing{{Data: []byte(large)}})
	require.NoError(t, err)
	stored := client.HGetAll(ctx, keys.messages).Val()
	require.Len(t, stored, 1, "the large message alone is hashed")
	for id, data := range stored {
		assert.Equal(t, large, data)
		assert.Equal(t, map[string]string{id: "2"}, client.HGetAll(ctx, keys.refs).Val(), "held by the group and the parked set")
		assert.NotNil(t, client.ZScore(ctx, keys.parked, id).Val())
	}

	// The first group claims and acks what is due: the window's copies are left whole.
	claimed, err := s.Claim(ctx, first, firstEpoch, testClaim(), 10, time.Minute, nil)
	require.NoError(t, err)
	require.Len(t, claimed.Messages, 3)
	_, err = s.Ack(ctx, first, firstEpoch, leasesOf(claimed.Messages))
	require.NoError(t, err)
	assert.EqualValues(t, 4, client.ZCard(ctx, keys.parked).Val())

	second := part.Of("second")
	epoch, _, err := s.RegisterGroup(ctx, second, time.Minute, 5)
	require.NoError(t, err)
	secondDue := client.ZRange(ctx, s.keys.group(second).due, 0, -1).Val()
	require.Len(t, secondDue, 4)
	ids := map[string]bool{}
	for _, m := range append(secondDue, client.ZRange(ctx, keys.parked, 0, -1).Val()...) {
		ids[m[:12]] = true
	}
	assert.Len(t, ids, 7, "the embedded copies under IDs of the second group's own; the large one shared")
	claimed, err = s.Claim(ctx, second, epoch, testClaim(), 10, time.Minute, nil)
	require.NoError(t, err)
	require.Len(t, claimed.Messages, 3)
	assert.Equal(t, "now-1", string(claimed.Messages[0].Data))
	assert.Equal(t, "now-2", string(claimed.Messages[1].Data))
	assert.Equal(t, large, string(claimed.Messages[2].Data))
	_, err = s.Ack(ctx, second, epoch, leasesOf(claimed.Messages))
	require.NoError(t, err)
	largeID := claimed.Messages[2].ID
	assert.Equal(t, map[string]string{largeID: "1"}, client.HGetAll(ctx, keys.refs).Val(), "acked by both groups, the large message is held by the window alone")

	letters, err := s.Publish(ctx, part, testCall(), []string{testGroup, "second"}, []Outgoing{{Data: []byte("past-the-cap")}, {Data: []byte("too")}})
	require.NoError(t, err)
	assert.Equal(t, "ss", letters)
	assert.Zero(t, client.Exists(ctx, keys.window).Val(), "the cap closed the window")
	assert.Zero(t, client.ZCard(ctx, keys.parked).Val(), "nothing more parked, and the window's leftover dropped")
	assert.NotContains(t, client.HKeys(ctx, keys.refs).Val(), largeID, "the large message's last hold ended")
	assert.NotContains(t, client.HKeys(ctx, keys.messages).Val(), largeID)
	claimed, err = s.Claim(ctx, first, firstEpoch, testClaim(), 10, time.Minute, nil)
	require.NoError(t, err)
	require.Len(t, claimed.Messages, 2)
	assert.Equal(t, "past-the-cap", string(claimed.Messages[0].Data))
}

// TestAcksCountDownTheHoldersOfAMessageOfElevenGroups: drop counts a message's holders down with
// a table for the counts 1 to 9 and arithmetic beyond it. Published to 11 groups, a message is
// held 11 times in refs; each group's ack takes one hold (10 is text the table does not hold,
// 9 and below are), and the last ack deletes the message and its count.
func TestAcksCountDownTheHoldersOfAMessageOfElevenGroups(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "eleven-holders"}
		keys := s.keys.topic(part)
		groups := make([]string, 11)
		epochs := make([]string, 11)
		for i := range groups {
			groups[i] = "g" + strconv.Itoa(i)
			epoch, _, err := s.RegisterGroup(ctx, part.Of(groups[i]), -1, 0)
			require.NoError(t, err)
			epochs[i] = epoch
		}
		_, err := s.Publish(ctx, part, testCall(), groups, []Outgoing{{Data: []byte("shared")}})
		require.NoError(t, err)
		for i, name := range groups {
			claimed, err := s.Claim(ctx, part.Of(name), epochs[i], testClaim(), 10, time.Minute, nil)
			require.NoError(t, err)
			require.Len(t, claimed.Messages, 1)
			id := claimed.Messages[0].ID
			assert.Equal(t, strconv.Itoa(11-i), client.HGet(ctx, keys.refs, id).Val(), "before the ack of group %d", i)
			refused, err := s.Ack(ctx, part.Of(name), epochs[i], []Lease{claimed.Messages[0].Lease})
			require.NoError(t, err)
			require.Empty(t, refused)
			if i < 10 {
				assert.Equal(t, "shared", client.HGet(ctx, keys.messages, id).Val(), "still held after the ack of group %d", i)
			}
		}
		assert.Zero(t, client.Exists(ctx, keys.messages, keys.refs).Val(), "the last ack deleted the message and its count")
	})
}

// TestAPlainCallScoresEveryScheduleForm: publish_score reads the three forms of a schedule (a
// delay, a delay with its latest due time, a due time) on Redis and miniredis. Each message's
// due time, against the Redis clock read before and after the call: a delay of a minute; a
// negative delay (due at once); a delay of a minute whose latest due time, 10 s on, cuts it;
// one whose latest due time has passed (due at once, never before the call); a due time an hour
// on; a due time that has passed (due at once).
func TestAPlainCallScoresEveryScheduleForm(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		s := testStore(client)
		ctx := context.Background()
		part := Partition{Topic: "schedule-forms"}
		_, _, err := s.RegisterGroup(ctx, part.Of(testGroup), -1, 0)
		require.NoError(t, err)
		client.Del(ctx, s.keys.topic(part).window)
		now := time.Now()
		msgs := []Outgoing{
			{Data: []byte("delay"), Delay: time.Minute},
			{Data: []byte("negative"), Delay: -time.Minute},
			{Data: []byte("cut"), Delay: time.Minute, Latest: now.Add(10 * time.Second)},
			{Data: []byte("latest-passed"), Delay: time.Minute, Latest: now.Add(-time.Minute)},
			{Data: []byte("at"), At: now.Add(time.Hour)},
			{Data: []byte("at-passed"), At: now.Add(-time.Hour)},
		}
		before := client.Time(ctx).Val()
		_, err = s.Publish(ctx, part, testCall(), []string{testGroup}, msgs)
		require.NoError(t, err)
		after := client.Time(ctx).Val()
		due := map[string]float64{}
		for _, z := range client.ZRangeWithScores(ctx, s.keys.group(part.Of(testGroup)).due, 0, -1).Val() {
			due[strings.SplitN(z.Member.(string), "|", 2)[1]] = z.Score
		}
		us := func(t time.Time) float64 { return float64(t.UnixMicro()) }
		within := func(name string, low, high float64) {
			assert.GreaterOrEqual(t, due[name], low, name)
			assert.LessOrEqual(t, due[name], high, name)
		}
		within("delay", us(before.Add(time.Minute)), us(after.Add(time.Minute)))
		within("negative", us(before), us(after))
		assert.Equal(t, us(now.Add(10*time.Second)), due["cut"])
		within("latest-passed", us(before), us(after))
		assert.Equal(t, us(now.Add(time.Hour)), due["at"])
		within("at-passed", us(before), us(after))
	})
}

package redisdelay_test

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// publishAt publishes n messages due at the same instant, with UUIDs prefix0..prefix(n-1), in
// calls of 5,000: with _watermill_delayed_until alone, every message shares one due time, as
// messages sent for "08:00" do.
func publishAt(t *testing.T, pub *redisdelay.Publisher, topic, prefix string, n int, due time.Time, payload []byte) {
	t.Helper()
	for start := 0; start < n; start += 5000 {
		msgs := make([]*message.Message, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			msg := message.NewMessage(prefix+strconv.Itoa(i), payload)
			msg.Metadata.Set(delay.DelayedUntilKey, due.Format(time.RFC3339))
			msgs = append(msgs, msg)
		}
		require.NoError(t, pub.Publish(topic, msgs...))
	}
}

// craftedCursor builds a List cursor by hand, as anyone who can edit a URL can: partition 0,
// a due time and any member.
func craftedCursor(due time.Time, member string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("0 " + strconv.FormatInt(due.UnixMicro(), 10) + " " + member))
}

// slowCommands returns the commands of the slow log of the Redis that client talks to that
// took longer than d, and the times of its script calls, sorted.
func slowCommands(t *testing.T, client redis.UniversalClient, d time.Duration) ([]redis.SlowLog, []time.Duration) {
	t.Helper()
	logs, err := client.SlowLogGet(context.Background(), -1).Result()
	require.NoError(t, err)
	var slow []redis.SlowLog
	var scripts []time.Duration
	for _, l := range logs {
		if l.Duration > d {
			slow = append(slow, l)
		}
		if strings.EqualFold(l.Args[0], "evalsha") {
			scripts = append(scripts, l.Duration)
		}
	}
	slices.Sort(scripts)
	return slow, scripts
}

// netOutput returns how many bytes the Redis that client talks to has sent to its clients.
func netOutput(t *testing.T, client redis.UniversalClient) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "stats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no total_net_output_bytes in INFO stats")
	return 0
}

// requireNoSlowCommands fails the test for each command of the slow log slower than d that is
// slow again each of three times it runs alone, and returns the longest script call. The slow
// log measures wall time, and on a machine shared with other work a command is sometimes
// descheduled while it runs; work that is really slow is slow every time. The slow log must
// log every command (slowlog-log-slower-than 0). It logs the median and longest script call.
func requireNoSlowCommands(t *testing.T, client redis.UniversalClient, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	slow, scripts := slowCommands(t, client, d)
	require.NotEmpty(t, scripts)
	t.Logf("%d script calls: median %s, longest %s; %d commands over %s before running them again",
		len(scripts), scripts[len(scripts)/2], scripts[len(scripts)-1], len(slow), d)
	for _, entry := range slow {
		args := make([]any, len(entry.Args))
		for i, a := range entry.Args {
			require.NotContains(t, a, "more bytes)", "a slow log entry cut short cannot run again")
			args[i] = a
		}
		again := true
		for range 3 {
			require.NoError(t, client.SlowLogReset(ctx).Err())
			require.NoError(t, client.Do(ctx, args...).Err())
			if s, _ := slowCommands(t, client, d); len(s) == 0 {
				again = false
				break
			}
		}
		assert.False(t, again, "slower than %s three times: %v (first %s)", d, entry.Args, entry.Duration)
	}
}

// The cursor resumes from the last message's due time and member, found again by rank, so a
// page costs the same whatever the cursor: on redis-server, 300,000 messages of one due time
// page from start to end, and crafted cursors land in the middle, without one command slower
// than 5 ms in the slow log (30,000 without REDISDELAY_LONG=1). miniredis and the cluster check
// the order with fewer messages.
func TestListPagesThroughEqualDueTimesWithinFiveMilliseconds(t *testing.T) {
	onRedis := 30_000
	if redistest.Long(t) {
		onRedis = 300_000
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		n := 3000
		if b.name == "redis" {
			n = onRedis
		}
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		// The only group, without the new-group window: each message is stored in its member,
		// as ID|message, so the cursor holds the short form "ID|".
		require.NoError(t, newSubscriber(t, b, inGroupWithoutWindow(redisdelay.DefaultConsumerGroup)).SubscribeInitialize(topic))
		due := time.Now().Add(time.Hour).Truncate(time.Second)
		publishAt(t, pub, topic, "m", n, due, []byte("payload"))
		list := func(cursor string, limit int) redisdelay.ListPage {
			page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled, Cursor: cursor, Limit: limit})
			require.NoError(t, err)
			return page
		}
		if b.name == "redis" {
			// A script's first run is an EVAL carrying its text, which Redis compiles, and the
			// slow log cuts that text short, so it cannot be run again: a page past the due set
			// (list.lua, then listfar.lua for the compact tier) loads both scripts first.
			require.Empty(t, list(craftedCursor(due, "\xff\xff"), 10).Messages)
			require.NoError(t, b.client.ConfigSet(context.Background(), "slowlog-log-slower-than", "0").Err())
			require.NoError(t, b.client.ConfigSet(context.Background(), "slowlog-max-len", "100000").Err())
			require.NoError(t, b.client.SlowLogReset(context.Background()).Err())
		}
		var ids []string
		seen := make(map[string]bool, n)
		for cursor := ""; ; {
			page := list(cursor, redisdelay.MaxListLimit)
			for _, m := range page.Messages {
				require.False(t, seen[m.UUID], "%s listed twice", m.UUID)
				seen[m.UUID] = true
				require.Equal(t, due, m.DueAt)
				require.Equal(t, "payload", m.Preview)
				ids = append(ids, m.ID)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		require.Len(t, seen, n)
		// Equal due times come in member order, which is ID order: publish order.
		for k := 1; k < len(ids); k++ {
			require.Less(t, ids[k-1], ids[k])
		}

		// Crafted cursors: after the short form of a member in the middle, the next member;
		// after its bare ID (no such member, but it sorts just before), the member itself;
		// after a member beyond every ID, nothing of that due time.
		mid := n / 2
		page := list(craftedCursor(due, ids[mid]+"|"), 3)
		require.Len(t, page.Messages, 3)
		assert.Equal(t, ids[mid+1], page.Messages[0].ID)
		page = list(craftedCursor(due, ids[mid]), 1)
		require.Len(t, page.Messages, 1)
		assert.Equal(t, ids[mid], page.Messages[0].ID)
		assert.Empty(t, list(craftedCursor(due, "\xff\xff"), 10).Messages)
		assert.Len(t, list(craftedCursor(due.Add(-time.Microsecond), "\xff\xff"), 10).Messages, 10)
		_, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled, Cursor: craftedCursor(due, strings.Repeat("m", 4096))})
		assert.Error(t, err, "a cursor's member is bounded")

		if b.name == "redis" {
			requireNoSlowCommands(t, b.client, 5*time.Millisecond)
		}
	})
}

// Members added and removed between two pages do not shift the cursor: every message that is
// there throughout is listed exactly once, in order, though the cursor's own member is gone.
func TestListCursorHoldsWhileMessagesComeAndGo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		// Two groups, so that messages are stored in the messages hash, not in their members.
		for _, g := range []string{"a", "b"} {
			require.NoError(t, newSubscriber(t, b, inGroup(g)).SubscribeInitialize(topic))
		}
		due := time.Now().Add(time.Hour).Truncate(time.Second)
		publishAt(t, pub, topic, "m", 40, due, []byte("payload"))
		list := func(cursor string) redisdelay.ListPage {
			page, err := in.List(context.Background(), topic, "a", redisdelay.ListOptions{State: redisdelay.StateScheduled, Cursor: cursor, Limit: 10})
			require.NoError(t, err)
			return page
		}
		first := list("")
		require.Len(t, first.Messages, 10)
		// The cursor's own member, the one after it and one before it go; newer ones come.
		for _, ref := range []string{first.Messages[9].Ref, first.Messages[3].Ref} {
			outcome, err := outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef("a", ref)))
			require.NoError(t, err)
			require.Equal(t, redisdelay.OutcomeApplied, outcome)
		}
		next, err := in.List(context.Background(), topic, "a", redisdelay.ListOptions{State: redisdelay.StateScheduled, Cursor: first.NextCursor, Limit: 1})
		require.NoError(t, err)
		_, err = in.Cancel(context.Background(), topic, redisdelay.ByRef("a", next.Messages[0].Ref))
		require.NoError(t, err)
		publishAt(t, pub, topic, "late", 5, due, []byte("payload"))

		var uuids []string
		for cursor := first.NextCursor; cursor != ""; {
			page := list(cursor)
			for _, m := range page.Messages {
				uuids = append(uuids, m.UUID)
			}
			cursor = page.NextCursor
		}
		want := []string{}
		for i := 11; i < 40; i++ {
			want = append(want, "m"+strconv.Itoa(i))
		}
		for i := range 5 {
			want = append(want, "late"+strconv.Itoa(i))
		}
		assert.Equal(t, want, uuids)
	})
}

// A page of large dead letters carries previews, and one dead letter by ref reads that one
// message: with 300 dead letters of 100 KB, Redis sends well under 1 MB for a page of 50, for
// a page of up to 1,000 and for one dead letter.
func TestLargeDeadLettersAreListedAsPreviewsAndReadOneByRef(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		payload := []byte(strings.Repeat("0123456789", 10_000))
		// Published straight to the dead-letter topic, which has no group: its parked set holds
		// each message in its member, as dead-lettering does.
		var msgs []*message.Message
		for i := range 300 {
			msg := message.NewMessage("dead"+strconv.Itoa(i), payload)
			msg.Metadata.Set(redisdelay.DeadLetterReasonMetadataKey, "handler failed")
			msgs = append(msgs, msg)
		}
		dlt := redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)
		// 50 per call: 30 MB in one call outlasted OperationTimeout on miniredis under -race.
		for chunk := range slices.Chunk(msgs, 50) {
			require.NoError(t, pub.Publish(dlt, chunk...))
		}

		measure := func(f func()) int64 {
			if b.name != "redis" {
				f()
				return 0
			}
			before := netOutput(t, b.client)
			f()
			return netOutput(t, b.client) - before
		}
		var tab, all redisdelay.ListPage
		tabBytes := measure(func() {
			var err error
			tab, err = in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered, Limit: 50})
			require.NoError(t, err)
		})
		require.Len(t, tab.Messages, 50)
		for _, m := range tab.Messages {
			assert.Equal(t, len(payload), m.PayloadSize)
			assert.Equal(t, string(payload[:redisdelay.PreviewLength]), m.Preview)
			assert.Equal(t, "handler failed", m.Metadata[redisdelay.DeadLetterReasonMetadataKey])
			assert.Equal(t, redisdelay.StateDeadLettered, m.State)
			assert.Nil(t, m.Payload)
			assert.Less(t, len(m.Ref), 64, "a ref names the message, it does not carry it")
		}
		allBytes := measure(func() {
			var err error
			all, err = in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered, Limit: redisdelay.MaxListLimit})
			require.NoError(t, err)
		})
		// The page ends early, with a cursor, once Redis has read 8 MiB of messages for it.
		require.NotEmpty(t, all.Messages)
		assert.True(t, len(all.Messages) == 300 || all.NextCursor != "", "a page cut short has a cursor")

		var one redisdelay.MessageInfo
		oneBytes := measure(func() {
			var err error
			one, err = in.Message(context.Background(), topic, redisdelay.ByDeadLetter(redisdelay.DefaultConsumerGroup, tab.Messages[7].Ref))
			require.NoError(t, err)
		})
		assert.Equal(t, "dead7", one.UUID)
		assert.Equal(t, payload, one.Payload)
		assert.Equal(t, tab.Messages[7].Ref, one.Ref)
		assert.Equal(t, redisdelay.StateDeadLettered, one.State)

		if b.name == "redis" {
			t.Logf("Redis sent %d bytes for a page of 50, %d for a page of %d (limit 1,000), %d for one dead letter", tabBytes, allBytes, len(all.Messages), oneBytes)
			assert.Less(t, tabBytes, int64(200_000))
			assert.Less(t, allBytes, int64(1_000_000))
			assert.Less(t, oneBytes, int64(1_000_000))
		}

		// A ref of a message that the group holds is no dead letter, and the other way round.
		_, err := in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, tab.Messages[7].Ref))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		n, err := in.Requeue(context.Background(), topic, redisdelay.DefaultConsumerGroup, tab.Messages[7].Ref)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		_, err = in.Message(context.Background(), topic, redisdelay.ByDeadLetter(redisdelay.DefaultConsumerGroup, tab.Messages[7].Ref))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

// Metadata longer than what List reads of a message leaves a partial preview, which says so;
// Message reads it whole.
func TestListPreviewOfLongMetadataIsMarkedPartial(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		long := message.NewMessage(watermill.NewUUID(), []byte("long metadata"))
		long.Metadata.Set("a-first", "short")
		long.Metadata.Set("b-long", strings.Repeat("x", 2*redisdelay.ListReadBytes))
		delay.Message(long, delay.For(time.Hour))
		short := message.NewMessage(watermill.NewUUID(), []byte("short metadata"))
		delay.Message(short, delay.For(2*time.Hour))
		require.NoError(t, pub.Publish(topic, long, short))

		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		require.Len(t, page.Messages, 2)
		p := page.Messages[0]
		assert.True(t, p.Partial)
		assert.Equal(t, long.UUID, p.UUID)
		assert.Equal(t, "short", p.Metadata["a-first"])
		assert.NotContains(t, p.Metadata, "b-long")
		assert.Greater(t, p.PayloadSize, 2*redisdelay.ListReadBytes, "the stored size")
		assert.Empty(t, p.Preview)
		assert.False(t, page.Messages[1].Partial)
		assert.Equal(t, "short metadata", page.Messages[1].Preview)
		assert.Equal(t, len("short metadata"), page.Messages[1].PayloadSize)

		whole, err := in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, p.Ref))
		require.NoError(t, err)
		assert.False(t, whole.Partial)
		assert.Equal(t, long.Metadata.Get("b-long"), whole.Metadata["b-long"])
		assert.Equal(t, "long metadata", string(whole.Payload))
		assert.Equal(t, len("long metadata"), whole.PayloadSize)
	})
}

func TestListPagesAndShowsMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		publishDelayed(t, pub, topic, "m", 250, time.Hour)
		require.NoError(t, pub.Publish(topic, keyed("order-7", 2*time.Hour, "keyed payload")))

		seen := map[string]bool{}
		var last time.Time
		opts := redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 100}
		pages := 0
		for {
			page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, opts)
			require.NoError(t, err)
			pages++
			for _, m := range page.Messages {
				assert.False(t, seen[m.UUID], "%s listed twice", m.UUID)
				seen[m.UUID] = true
				assert.False(t, m.DueAt.Before(last), "due-time order")
				last = m.DueAt
				if m.Key == "" {
					assert.Equal(t, len("payload of ")+len(m.UUID), m.PayloadSize)
				}
			}
			if page.NextCursor == "" {
				break
			}
			opts.Cursor = page.NextCursor
		}
		assert.Len(t, seen, 251)
		assert.Equal(t, 3, pages)

		due, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDue})
		require.NoError(t, err)
		assert.Empty(t, due.Messages)

		first, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 1})
		require.NoError(t, err)
		require.Len(t, first.Messages, 1)
		m, err := in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, first.Messages[0].Ref))
		require.NoError(t, err)
		assert.Equal(t, first.Messages[0].UUID, m.UUID)
		assert.Equal(t, "payload of "+m.UUID, string(m.Payload))

		k, err := in.Message(context.Background(), topic, redisdelay.ByKey("order-7").InGroup(redisdelay.DefaultConsumerGroup))
		require.NoError(t, err)
		assert.Equal(t, "keyed payload", string(k.Payload))
		assert.Equal(t, "order-7", k.Key)
		assert.Equal(t, "keyed payload", k.Preview)

		_, err = in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, "0/"+base64.RawURLEncoding.EncodeToString([]byte("000000ffffff"))))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		_, err = in.List(context.Background(), topic, "nobody", opts)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

// TestTheLeaseSetMarkerHasNoRef: the lease set's marker member (see internal/store/scripts.go)
// is not a message: a ref crafted from it names nothing.
func TestTheLeaseSetMarkerHasNoRef(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		publishDelayed(t, pub, topic, "held", 1, 0)
		msg := receive(t, ch, 5*time.Second) // in flight: the lease set and its marker exist
		_, lease := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
		marker, err := b.client.ZRangeByScore(context.Background(), lease, &redis.ZRangeBy{Min: "(1e300", Max: "+inf"}).Result()
		require.NoError(t, err)
		require.Len(t, marker, 1)
		ref := "0/" + base64.RawURLEncoding.EncodeToString([]byte(marker[0]))
		_, err = in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, ref))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		msg.Ack()
	})
}

// A dead letter, listed or read by its ref, says how many attempts it had, why the last one
// failed, when it died (the Redis time it was moved) and the key it had, and carries its whole
// payload.
func TestDeadLettersSayTheirAttemptsReasonAndTimeOfDeath(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 2 }), topic)
		before := time.Now()
		require.NoError(t, pub.Publish(topic, redisdelay.WithKey(message.NewMessage("m0", []byte("payload of m0")), "order-7")))
		receive(t, ch, 5*time.Second).Nack()
		receive(t, ch, 5*time.Second).Nack()
		var dead redisdelay.ListPage
		require.Eventually(t, func() bool {
			var err error
			dead, err = in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered})
			require.NoError(t, err)
			return len(dead.Messages) == 1
		}, 5*time.Second, 10*time.Millisecond)
		after := time.Now()

		listed := dead.Messages[0]
		one, err := in.Message(context.Background(), topic, redisdelay.ByDeadLetter(redisdelay.DefaultConsumerGroup, listed.Ref))
		require.NoError(t, err)
		for _, m := range []redisdelay.MessageInfo{listed, one} {
			assert.Equal(t, redisdelay.StateDeadLettered, m.State)
			assert.Equal(t, 2, m.Attempt, "the attempts it had, not its attempts on the dead-letter topic")
			assert.Equal(t, redisdelay.DeadLetterReasonNacked, m.Reason)
			assert.Equal(t, "order-7", m.Key, "the key it had")
			assert.WithinRange(t, m.DueAt, before.Add(-time.Second), after.Add(time.Second), "died between publish and list (clocks within 1 s)")
		}
		assert.Equal(t, "payload of m0", string(one.Payload))
		assert.Less(t, len(listed.Ref), 40, "a short ref")

		// Stats count them once: as the group's DeadLetters, not as parked on the dead-letter
		// topic, which has no group of its own.
		all, err := in.Stats(context.Background())
		require.NoError(t, err)
		dlt := redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)
		for _, st := range all {
			assert.NotEqual(t, dlt, st.Topic)
		}
		assert.Equal(t, int64(1), statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).DeadLetters)
	})
}

// TestListPagesThroughTheCompactTierAfterTheDueSet: a scheduled listing shows the due set's
// scheduled messages, then those of the group's compact tier, bucket by bucket and in the order
// they were stored within a bucket, each exactly once across pages that resume inside a
// bucket, with its due time and preview; Message reads a tier message by its ref, and CancelRef
// cancels it there (once: a second cancel finds nothing).
func TestListPagesThroughTheCompactTierAfterTheDueSet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const n, horizon, big = 250, 20 * time.Millisecond, 7
		topic := newTopic()
		pub := compactPublisher(t, b, horizon)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		// Keyed messages wait in the due set whatever their due time.
		var keyed []*message.Message
		for i := range 3 {
			msg := dueAt(n+i, time.Now().Add(2*time.Hour+time.Duration(i)*time.Second))
			msg.Metadata.Set(redisdelay.KeyMetadataKey, "key-"+strconv.Itoa(i))
			keyed = append(keyed, msg)
		}
		require.NoError(t, pub.Publish(topic, keyed...))
		start := time.Now().Add(time.Hour)
		due, stored := make([]time.Time, n), make([]int, n) // stored: position in the batch
		var batch []*message.Message
		for pos, i := range rand.Perm(n) {
			due[i], stored[i] = start.Add(time.Duration(i)*time.Millisecond), pos
			msg := dueAt(i, due[i])
			if i == big {
				msg.Payload = []byte(strings.Repeat("x", 3000)) // stored in the messages hash
			}
			batch = append(batch, msg)
		}
		require.NoError(t, pub.Publish(topic, batch...))
		require.Equal(t, int64(n), statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).Compact, "messages in the compact tier")

		all := listAll(t, in, topic, 40)
		require.Len(t, all, n+3)
		for k, m := range all[:3] {
			assert.Equal(t, strconv.Itoa(n+k), m.UUID, "the due set's messages first")
		}
		seen := map[string]bool{}
		for k, m := range all[3:] {
			i, err := strconv.Atoi(m.UUID)
			require.NoError(t, err)
			require.Less(t, i, n)
			assert.False(t, seen[m.UUID], "message %d listed twice", i)
			seen[m.UUID] = true
			assert.WithinDuration(t, due[i], m.DueAt, time.Second, "due time of message %d", i)
			if i == big {
				assert.Equal(t, strings.Repeat("x", redisdelay.PreviewLength), m.Preview)
				assert.Equal(t, 3000, m.PayloadSize)
			} else {
				assert.Equal(t, "payload "+m.UUID, m.Preview)
			}
			if k > 0 {
				prev := all[2+k]
				j, _ := strconv.Atoi(prev.UUID)
				bucket, prevBucket := m.DueAt.UnixMicro()/horizon.Microseconds(), prev.DueAt.UnixMicro()/horizon.Microseconds()
				assert.True(t, bucket > prevBucket || bucket == prevBucket && stored[i] > stored[j], "message %d listed after %d", i, j)
			}
		}

		for _, m := range all[3:] {
			want := "payload " + m.UUID
			switch m.UUID {
			case strconv.Itoa(big):
				want = strings.Repeat("x", 3000) // a whole member "ID" in the tier
			case "3": // a member "ID|message"
			default:
				continue
			}
			got, err := in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, m.Ref))
			require.NoError(t, err, "message %s by ref", m.UUID)
			assert.Equal(t, m.UUID, got.UUID)
			assert.Equal(t, m.DueAt, got.DueAt)
			assert.Equal(t, m.Ref, got.Ref)
			assert.Equal(t, want, string(got.Payload))
			before := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
			o, err := outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, m.Ref)))
			require.NoError(t, err, "cancel message %s by ref", m.UUID)
			assert.Equal(t, redisdelay.OutcomeApplied, o, "cancel message %s by ref", m.UUID)
			after := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
			assert.Equal(t, before.Scheduled-1, after.Scheduled, "scheduled after cancelling %s", m.UUID)
			assert.Equal(t, before.Compact-1, after.Compact, "in the compact tier after cancelling %s", m.UUID)
			_, err = in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, m.Ref))
			assert.ErrorIs(t, err, redisdelay.ErrNotFound, "message %s after its cancel", m.UUID)
			o, err = outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, m.Ref)))
			require.NoError(t, err)
			assert.Equal(t, redisdelay.OutcomeNotFound, o, "cancel message %s again", m.UUID)
		}
	})
}

// listAll lists the scheduled messages of the default group on topic in pages of limit.
func listAll(t *testing.T, in *redisdelay.Inspector, topic string, limit int) []redisdelay.MessageInfo {
	t.Helper()
	var all []redisdelay.MessageInfo
	opts := redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: limit}
	for range 100 {
		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, opts)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Messages), limit)
		all = append(all, page.Messages...)
		if page.NextCursor == "" {
			return all
		}
		opts.Cursor = page.NextCursor
	}
	t.Fatal("more than 100 pages")
	return nil
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

const (
	topic = "orders"
	group = redisdelay.DefaultConsumerGroup
)

func TestTopicsListsEveryTopicWithItsGroups(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "billing", "shipping")
	q.schedule(topic, newMessage("", "hello"))

	var topics []map[string]any
	q.json(&topics, "topics")
	require.Contains(t, topics, map[string]any{
		"topic": topic, "partitions": float64(1), "groups": []any{"billing", "shipping"},
	})

	out := q.ok("topics")
	assert.Regexp(t, `(?m)^TOPIC\s+PARTITIONS\s+GROUPS$`, out)
	assert.Regexp(t, `(?m)^orders\s+1\s+billing,shipping$`, out)
}

func TestStatsCountsScheduledMessages(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("", "a"), newMessage("", "b"), newMessage("", "c"))

	var stats []map[string]any
	q.json(&stats, "stats", "--topic", topic)
	require.Len(t, stats, 1)
	assert.Equal(t, topic, stats[0]["topic"])
	assert.Equal(t, group, stats[0]["group"])
	assert.Equal(t, float64(3), stats[0]["scheduled"])
	assert.Equal(t, float64(0), stats[0]["due"])
	assert.Equal(t, false, stats[0]["paused"])
	nextDue, err := time.Parse(time.RFC3339Nano, stats[0]["next_due"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Hour), nextDue, time.Minute)

	out := q.ok("stats")
	assert.Regexp(t, `(?m)^TOPIC\s+GROUP\s+SCHEDULED\s+IN COMPACT TIER\s+DUE\s+IN FLIGHT\s+DEAD LETTERS\s+OLDEST DUE AGE\s+NEXT DUE\s+PAUSED$`, out)
	assert.Regexp(t, `(?m)^orders\s+default\s+3\s+\d+\s+0\s+0\s+0\s+-\s+\S+\s+false$`, out)
}

func TestStatsWatchReprintsUntilInterrupted(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("", "a"))

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--addr", q.addr, "--output", "json", "stats", "--watch", "--interval", "50ms")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	dec := json.NewDecoder(stdout)
	for range 3 {
		var stats []statsView
		require.NoError(t, dec.Decode(&stats))
		require.Len(t, stats, 1)
		assert.Equal(t, int64(1), stats[0].Scheduled)
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), "stats --watch must end cleanly on SIGINT")
}

func TestListPagesThroughEveryMessageWithTheCursor(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	msgs := make([]*message.Message, 150)
	for n := range msgs {
		msgs[n] = newMessage(fmt.Sprintf("order-%03d", n), fmt.Sprintf("payload %d", n))
	}
	published := q.schedule(topic, msgs...)

	var first, second pageView
	q.json(&first, "list", "--topic", topic, "--state", "scheduled", "--limit", "100")
	require.Len(t, first.Messages, 100)
	require.NotEmpty(t, first.NextCursor)
	q.json(&second, "list", "--topic", topic, "--state", "scheduled", "--limit", "100", "--cursor", first.NextCursor)
	require.Len(t, second.Messages, 50)
	assert.Empty(t, second.NextCursor, "the last page has no next cursor")

	var listed []string
	for _, m := range append(first.Messages, second.Messages...) {
		listed = append(listed, m.UUID)
		assert.Equal(t, "scheduled", m.State)
		assert.Regexp(t, `^order-\d{3}$`, m.Key)
		assert.WithinDuration(t, time.Now().Add(time.Hour), deref(m.DueAt), time.Minute)
	}
	assert.ElementsMatch(t, published, listed)

	out := q.ok("list", "--topic", topic, "--state", "scheduled", "--limit", "100")
	assert.Regexp(t, `(?m)^REF\s+ID\s+UUID\s+KEY\s+DUE AT\s+ATTEMPT\s+SIZE\s+PREVIEW$`, out)
	m := first.Messages[0]
	assert.Regexp(t, fmt.Sprintf(`(?m)^%s\s+%s\s+%s\s+%s\s+\S+\s+0\s+%d\s+%s$`, m.Ref, m.ID, m.UUID, m.Key, m.PayloadSize, m.Preview), out)
	assert.Contains(t, out, "next page: --cursor "+first.NextCursor)
}

func TestShowPrintsTheWholePayloadAndMetadata(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	payload := strings.Repeat("x", redisdelay.PreviewLength) + " and the end"
	msg := newMessage("order-1", payload)
	msg.Metadata.Set("customer", "ada")
	q.schedule(topic, msg)

	var byKey messageView
	q.json(&byKey, "show", "--topic", topic, "--key", "order-1")
	assert.Equal(t, payload, byKey.Payload)
	assert.Equal(t, msg.UUID, byKey.UUID)
	assert.Equal(t, "ada", byKey.Metadata["customer"])
	assert.Equal(t, len(payload), byKey.PayloadSize)

	var byRef messageView
	q.json(&byRef, "show", "--topic", topic, "--ref", byKey.Ref)
	assert.Equal(t, byKey, byRef)

	out := q.ok("show", "--topic", topic, "--key", "order-1")
	assert.Regexp(t, `(?m)^key:\s+order-1$`, out)
	assert.Regexp(t, `(?m)^\s+customer=ada$`, out)
	assert.True(t, strings.HasSuffix(out, "payload:\n"+payload+"\n"), out)
}

func TestCancelByKeyRemovesTheMessage(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"), newMessage("order-2", "b"))

	var outcome outcomeView
	q.json(&outcome, "cancel", "--topic", topic, "--key", "order-1", "--yes")
	assert.Equal(t, map[string]string{group: "applied"}, outcome.Groups)

	assert.Equal(t, redisdelay.StateNotFound, q.status(topic, "order-1", group).State)
	assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-2", group).State, "another message is untouched")
	assert.Equal(t, int64(1), q.stats(topic, group).Scheduled)
}

func TestCancelByRefRemovesTheMessageFromItsGroup(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "billing", "shipping")
	q.schedule(topic, newMessage("order-1", "a"))
	var page pageView
	q.json(&page, "list", "--topic", topic, "--group", "billing", "--state", "scheduled")
	require.Len(t, page.Messages, 1)

	out := q.ok("cancel", "--topic", topic, "--group", "billing", "--ref", page.Messages[0].Ref, "--yes")
	assert.Regexp(t, `(?m)^billing\s+cancelled$`, out)

	assert.Equal(t, redisdelay.StateFinished, q.status(topic, "order-1", "billing").State)
	assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-1", "shipping").State)
}

func TestDestructiveCommandsChangeNothingUnlessConfirmed(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"))
	before := q.stats(topic, group)

	for _, tc := range []struct {
		args     []string
		question string
	}{
		{[]string{"cancel", "--topic", topic, "--key", "order-1"}, `Cancel key "order-1" on topic "orders"? [y/N] `},
		{[]string{"purge", "--topic", topic, "--state", "scheduled"}, "Purge the scheduled messages of group default on topic orders? [y/N] "},
		{[]string{"remove-group", "--topic", topic, "--group", group}, "Remove group default from topic orders? [y/N] "},
		{[]string{"requeue", "--topic", topic, "--all"}, "Requeue all dead letters of group default on topic orders? [y/N] "},
	} {
		for _, answer := range []string{"n\n", "maybe\n", ""} {
			r := q.run(answer, tc.args...)
			assert.Equal(t, 1, r.code, "%s answered %q", tc.args[0], answer)
			assert.Equal(t, tc.question+"redisdelay: not confirmed; nothing was changed\n", r.stderr)
			assert.Empty(t, r.stdout)
		}
	}

	assert.Equal(t, before, q.stats(topic, group))
	assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-1", group).State)

	r := q.run("y\n", "cancel", "--topic", topic, "--key", "order-1")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, redisdelay.StateNotFound, q.status(topic, "order-1", group).State, "answering y cancels")
}

func TestMissingMessagesAreNamedInTheError(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)

	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"cancel", "--topic", topic, "--key", "nope", "--yes"}, `redisdelay: key "nope" on topic "orders": not found`},
		{[]string{"run-now", "--topic", topic, "--ref", "0/000000000000"}, `redisdelay: message "0/000000000000" of group "default" on topic "orders": not found`},
		{[]string{"show", "--topic", topic, "--key", "nope"}, `redisdelay: key "nope" in group "default" on topic "orders"`},
		{[]string{"pause", "--topic", topic, "--group", "nobody"}, `redisdelay: consumer group "nobody" on topic "orders": not found`},
		{[]string{"stats", "--topic", "nowhere"}, `redisdelay: topic "nowhere": not found`},
	} {
		r := q.run("", tc.args...)
		assert.Equal(t, 1, r.code, tc.args)
		assert.True(t, strings.HasPrefix(r.stderr, tc.stderr), "stderr %q, want prefix %q", r.stderr, tc.stderr)
		assert.Equal(t, 1, strings.Count(r.stderr, "redisdelay:"), r.stderr)
		assert.Equal(t, 1, strings.Count(strings.ReplaceAll(r.stderr, "-", " "), "not found"), "not found, once: %s", r.stderr)
	}
}

func TestOutcomesSayWhatHappenedToAMessageInFlight(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "billing", "shipping")
	q.schedule(topic, newMessage("order-1", "a"), newMessage("order-2", "b"))

	// billing's subscriber holds order-1 without acking it; shipping holds nothing.
	require.Contains(t, q.ok("run-now", "--topic", topic, "--key", "order-1"), "due now")
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	messages, err := q.subscriber(redisdelay.SubscriberConfig{ConsumerGroup: "billing"}).Subscribe(ctx, topic)
	require.NoError(t, err)
	var held *message.Message
	select {
	case held = <-messages:
		require.Equal(t, "order-1", held.Metadata.Get(redisdelay.KeyMetadataKey))
	case <-ctx.Done():
		t.Fatal("order-1 was not delivered")
	}

	out := q.ok("run-now", "--topic", topic, "--key", "order-1")
	assert.Regexp(t, `(?m)^billing\s+unchanged: a delivery is under way$`, out)
	assert.Regexp(t, `(?m)^shipping\s+due now$`, out)
	out = q.ok("reschedule", "--topic", topic, "--key", "order-1", "--in", "1h")
	assert.Regexp(t, `(?m)^billing\s+unchanged: a delivery is under way$`, out)
	assert.Regexp(t, `(?m)^shipping\s+rescheduled$`, out)

	var outcome outcomeView
	q.json(&outcome, "cancel", "--topic", topic, "--key", "order-1", "--yes")
	assert.Equal(t, map[string]string{"billing": "in-flight", "shipping": "applied"}, outcome.Groups, "JSON keeps the outcome's word")
	held.Ack() // refused by Redis (the lease is gone); the subscription moves on
	out = q.ok("cancel", "--topic", topic, "--key", "order-2", "--yes")
	assert.Regexp(t, `(?m)^billing\s+cancelled$`, out)
	assert.Regexp(t, `(?m)^shipping\s+cancelled$`, out)

	q.schedule(topic, newMessage("order-3", "c"))
	q.json(&outcome, "run-now", "--topic", topic, "--key", "order-3")
	require.Equal(t, "applied", outcome.Groups["billing"])
	select {
	case msg := <-messages:
		require.Equal(t, "order-3", msg.Metadata.Get(redisdelay.KeyMetadataKey), "order-1 was cancelled")
	case <-ctx.Done():
		t.Fatal("order-3 was not delivered")
	}
	out = q.ok("cancel", "--topic", topic, "--key", "order-3", "--yes")
	assert.Regexp(t, `(?m)^billing\s+cancelled; the delivery under way finishes$`, out)
	assert.Regexp(t, `(?m)^shipping\s+cancelled$`, out)
}

func TestRunMakesAScheduledMessageDueAtOnce(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"))

	var outcome outcomeView
	q.json(&outcome, "run-now", "--topic", topic, "--key", "order-1")
	assert.Equal(t, map[string]string{group: "applied"}, outcome.Groups)
	assert.WithinDuration(t, time.Now(), deref(outcome.DueAt), time.Minute)
	s := q.stats(topic, group)
	assert.Equal(t, int64(0), s.Scheduled)
	assert.Equal(t, int64(1), s.Due)

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	messages, err := q.subscriber(redisdelay.SubscriberConfig{}).Subscribe(ctx, topic)
	require.NoError(t, err)
	select {
	case msg := <-messages:
		assert.Equal(t, "order-1", msg.Metadata.Get(redisdelay.KeyMetadataKey))
		msg.Ack()
	case <-ctx.Done():
		t.Fatal("the message was not delivered after run")
	}
}

func TestRescheduleMovesTheDueTime(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"))

	var outcome outcomeView
	q.json(&outcome, "reschedule", "--topic", topic, "--key", "order-1", "--in", "10m")
	assert.Equal(t, map[string]string{group: "applied"}, outcome.Groups)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute), q.status(topic, "order-1", group).DueAt, time.Minute)

	var page pageView
	q.json(&page, "list", "--topic", topic, "--state", "scheduled")
	require.Len(t, page.Messages, 1)
	at := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	q.ok("reschedule", "--topic", topic, "--ref", page.Messages[0].Ref, "--at", at)
	assert.Equal(t, int64(1), q.stats(topic, group).Due, "a past due time means due at once")

	r := q.run("", "reschedule", "--topic", topic, "--key", "order-1", "--at", "tomorrow")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "redisdelay: --at: ")
}

func TestPauseAndResumeToggleStatsPaused(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)

	assert.Contains(t, q.ok("pause", "--topic", topic), "Group default on topic orders is paused.")
	assert.True(t, q.stats(topic, group).Paused)
	var resumed map[string]any
	q.json(&resumed, "resume", "--topic", topic)
	assert.Equal(t, map[string]any{"topic": topic, "group": group, "paused": false}, resumed)
	assert.False(t, q.stats(topic, group).Paused)
}

func TestRequeueBringsDeadLettersBack(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	sub := q.subscriber(redisdelay.SubscriberConfig{MaxAttempts: 1})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, q.pub.Publish(topic, newMessage("", "first"), newMessage("", "second")))
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	messages, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	for range 2 {
		select {
		case msg := <-messages:
			msg.Nack()
		case <-ctx.Done():
			t.Fatal("the messages were not delivered")
		}
	}
	require.Eventually(t, func() bool { return q.stats(topic, group).DeadLetters == 2 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, sub.Close(), "nothing may claim the requeued messages")

	r := q.run("", "requeue", "--topic", topic, "--yes")
	assert.Equal(t, 1, r.code, "requeue needs --ref or --all")

	var dead pageView
	q.json(&dead, "list", "--topic", topic, "--state", "dead-lettered")
	require.Len(t, dead.Messages, 2)
	for _, m := range dead.Messages {
		assert.True(t, utf8.ValidString(m.Ref) && !strings.ContainsAny(m.Ref, " \t\n\x00"), "a ref is plain text: %q", m.Ref)
	}
	var one map[string]any
	q.json(&one, "requeue", "--topic", topic, "--ref", dead.Messages[0].Ref, "--yes")
	assert.Equal(t, float64(1), one["requeued"])
	s := q.stats(topic, group)
	assert.Equal(t, [2]int64{1, 1}, [2]int64{s.DeadLetters, s.Due}, "dead letters, due")

	assert.Contains(t, q.ok("requeue", "--topic", topic, "--all", "--yes"), "Requeued 1 dead letters of group default on topic orders.")
	s = q.stats(topic, group)
	assert.Equal(t, [2]int64{0, 2}, [2]int64{s.DeadLetters, s.Due}, "dead letters, due")
}

func TestDeadLettersAreListedAndShownInFullByTheRefListPrints(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	sub := q.subscriber(redisdelay.SubscriberConfig{MaxAttempts: 2})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	messages, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	payload := `{"order":9,"note":"` + strings.Repeat("a long note ", 20) + `"}`
	keyed := newMessage("order-9", payload)
	before := time.Now()
	require.NoError(t, q.pub.Publish(topic, keyed))
	for range 2 {
		select {
		case msg := <-messages:
			msg.Nack()
		case <-ctx.Done():
			t.Fatal("the message was not delivered twice")
		}
	}
	require.Eventually(t, func() bool { return q.stats(topic, group).DeadLetters == 1 }, 10*time.Second, 20*time.Millisecond)

	out := q.ok("list", "--topic", topic, "--state", "dead-lettered")
	assert.Regexp(t, `(?m)^REF\s+ID\s+UUID\s+KEY\s+DEAD-LETTERED AT\s+ATTEMPTS\s+REASON\s+SIZE\s+PREVIEW$`, out)
	line := regexp.MustCompile(`(?m)^(\S+)\s+\S+\s+` + keyed.UUID + `\s+order-9\s+\S+\s+2\s+nacked\s+` + fmt.Sprint(len(payload)) + `\s`).FindStringSubmatch(out)
	require.NotNil(t, line, "the dead letter's row: %s", out)
	ref := line[1]
	assert.Less(t, len(ref), 40, "a short ref: %s", ref)

	var listed pageView
	q.json(&listed, "list", "--topic", topic, "--state", "dead-lettered")
	require.Len(t, listed.Messages, 1)
	m := listed.Messages[0]
	assert.Equal(t, [4]any{"dead-lettered", 2, "nacked", "order-9"}, [4]any{m.State, m.Attempt, m.Reason, m.Key})
	require.NotNil(t, m.DueAt)
	assert.WithinRange(t, *m.DueAt, before.Add(-time.Second), time.Now().Add(time.Second), "due_at is when it died")
	assert.Equal(t, ref, m.Ref)

	for _, args := range [][]string{{}, {"--state", "dead-lettered"}} {
		shown := q.ok(append([]string{"show", "--topic", topic, "--ref", ref}, args...)...)
		assert.Regexp(t, `(?m)^state:\s+dead-lettered$`, shown, args)
		assert.Regexp(t, `(?m)^attempts:\s+2$`, shown, args)
		assert.Regexp(t, `(?m)^reason:\s+nacked$`, shown, args)
		assert.Regexp(t, `(?m)^key:\s+order-9$`, shown, args)
		assert.Regexp(t, `(?m)^dead-lettered at:\s+\d{4}-`, shown, args)
		assert.Contains(t, shown, "payload:\n"+payload+"\n", "the whole payload")
	}
	var shown messageView
	q.json(&shown, "show", "--topic", topic, "--ref", ref)
	assert.Equal(t, payload, shown.Payload)
	assert.Equal(t, "nacked", shown.Metadata[redisdelay.DeadLetterReasonMetadataKey])

	r := q.run("", "show", "--topic", topic, "--ref", ref, "--state", "scheduled")
	assert.Equal(t, 1, r.code, "no message of the group has that ref")
	assert.Contains(t, r.stderr, "not found")
}

// Each topic numbers its messages, so the first message of a group and the first dead letter
// of its dead-letter topic, both too large to be stored inline, have the same ref: show
// without --state refuses to guess.
func TestShowAsksForTheStateWhenARefNamesAMessageAndADeadLetter(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	sub := q.subscriber(redisdelay.SubscriberConfig{MaxAttempts: 1})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	messages, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	large := strings.Repeat("x", 4096)
	q.schedule(topic, newMessage("", "later "+large))
	// Three dead letters, numbered around the scheduled message's number on the dead-letter
	// topic: one of them has it. (IDs start from the Redis clock, so the test sets the
	// dead-letter topic's counter; counters of two topics can meet like this in time.)
	last, err := q.client.Get(ctx, redisdelay.DefaultKeyPrefix+"{"+topic+"}:seq").Int64()
	require.NoError(t, err)
	dlt := redisdelay.DefaultKeyPrefix + "{" + topic + "}" + redisdelay.DeadLetterInfix + group + ":seq"
	require.NoError(t, q.client.Set(ctx, dlt, last-2, 0).Err())
	for n := range 3 {
		require.NoError(t, q.pub.Publish(topic, newMessage("", fmt.Sprintf("now %d %s", n, large))))
		select {
		case msg := <-messages:
			msg.Nack()
		case <-ctx.Done():
			t.Fatal("the message due now was not delivered")
		}
	}
	require.Eventually(t, func() bool { return q.stats(topic, group).DeadLetters == 3 }, 10*time.Second, 20*time.Millisecond)
	var scheduled, dead pageView
	q.json(&scheduled, "list", "--topic", topic, "--state", "scheduled")
	q.json(&dead, "list", "--topic", topic, "--state", "dead-lettered")
	require.Len(t, scheduled.Messages, 1)
	ref := scheduled.Messages[0].Ref
	i := slices.IndexFunc(dead.Messages, func(m messageView) bool { return m.Ref == ref })
	require.GreaterOrEqual(t, i, 0, "a dead letter's ref looks like the scheduled message's %s", ref)
	deadPayload := dead.Messages[i].Preview

	r := q.run("", "show", "--topic", topic, "--ref", ref)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "give --state")
	var one messageView
	q.json(&one, "show", "--topic", topic, "--ref", ref, "--state", "dead-lettered")
	assert.True(t, strings.HasPrefix(one.Payload, deadPayload) && strings.HasSuffix(one.Payload, large), "the dead letter")
	q.json(&one, "show", "--topic", topic, "--ref", ref, "--state", "scheduled")
	assert.Equal(t, "later "+large, one.Payload)
}

func TestStatsListAndShowTheParkedMessagesOfATopicWithNoGroup(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	require.NoError(t, q.pub.Publish("signups", newMessage("", "now 1"), newMessage("", "now 2")))
	q.schedule("signups", newMessage("", "later"))

	out := q.ok("stats", "--topic", "signups")
	assert.Regexp(t, `(?m)^signups\s+\(parked\)\s+1\s+0\s+2\s+0\s+0\s+\S+\s+\S+\s+false$`, out)
	assert.Contains(t, out, "(parked): the topic has no consumer group")
	var stats []statsView
	q.json(&stats, "stats", "--topic", "signups")
	require.Len(t, stats, 1)
	assert.True(t, stats[0].Parked)
	assert.Equal(t, [3]any{"", int64(2), int64(1)}, [3]any{stats[0].Group, stats[0].Due, stats[0].Scheduled})

	var due pageView
	q.json(&due, "list", "--topic", "signups", "--parked", "--state", "due")
	require.Len(t, due.Messages, 2)
	shown := q.ok("show", "--topic", "signups", "--parked", "--ref", due.Messages[1].Ref)
	assert.Contains(t, shown, "payload:\nnow 2\n")

	r := q.run("", "list", "--topic", "signups", "--parked", "--group", "x", "--state", "due")
	assert.Equal(t, 1, r.code, "--parked names no group")
	q.register("signups", group)
	r = q.run("", "list", "--topic", "signups", "--parked", "--state", "due")
	assert.Equal(t, 1, r.code, "the first group took them")
	assert.Equal(t, int64(2), q.stats("signups", group).Due)
}

func TestPurgeDropsTheMessagesOfOneState(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("", "a"), newMessage("", "b"), newMessage("", "c"))
	require.NoError(t, q.pub.Publish(topic, newMessage("", "due now")))

	var purged map[string]any
	q.json(&purged, "purge", "--topic", topic, "--state", "scheduled", "--yes")
	assert.Equal(t, float64(3), purged["purged"])
	s := q.stats(topic, group)
	assert.Equal(t, [2]int64{0, 1}, [2]int64{s.Scheduled, s.Due}, "scheduled, due")
}

func TestDeleteGroupRemovesTheGroupFromItsTopic(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "billing", "shipping")
	q.schedule(topic, newMessage("order-1", "a"))

	assert.Contains(t, q.ok("remove-group", "--topic", topic, "--group", "shipping", "--yes"),
		"Removed group shipping from topic orders and dropped 1 messages.")

	var topics []topicView
	q.json(&topics, "topics")
	// Each group's dead-letter topic is a topic of its own, and stays.
	assert.Contains(t, topics, topicView{Topic: topic, Partitions: 1, Groups: []string{"billing"}})
	assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-1", "billing").State, "other groups keep the message")
}

func TestAnUnknownOutputFormatIsRefused(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	r := q.run("", "--output", "yaml", "topics")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "redisdelay: --output is \"yaml\", want table or json\n", r.stderr)
	assert.Empty(t, r.stdout)
}

func TestDashboardServesTheOverviewUntilInterrupted(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("", "a"), newMessage("", "b"))

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--addr", q.addr, "dashboard", "--listen", "127.0.0.1:0", "--path", "/queues")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	url := strings.TrimSpace(strings.TrimPrefix(line, "dashboard on "))
	require.True(t, strings.HasSuffix(url, "/queues/"), "%q", line)

	res, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), topic)
	assert.NotEmpty(t, res.Header.Get("Content-Security-Policy"))
	res, err = http.Get(url + "schedules")
	require.NoError(t, err)
	body, err = io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), "This dashboard is read-only")

	// Read-only unless --allow-actions: a pause is refused.
	res, err = http.PostForm(url+"topic/"+topic+"/group/"+group+"/pause", nil)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
	assert.False(t, q.stats(topic, group).Paused)

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), "the dashboard must end cleanly on SIGINT")
}

func TestJSONLeavesOutTimesThatDoNotApply(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"))

	assert.Contains(t, q.ok("--output", "json", "stats"), `"next_due":`)
	out := q.ok("--output", "json", "list", "--topic", topic, "--state", "scheduled")
	assert.Contains(t, out, `"due_at":`)
	assert.NotContains(t, out, `"lease_deadline"`, "a scheduled message has no lease")
	out = q.ok("--output", "json", "cancel", "--topic", topic, "--key", "order-1", "--yes")
	assert.NotContains(t, out, `"due_at"`, "a cancel has no new due time")
	assert.NotContains(t, q.ok("--output", "json", "stats"), `"next_due"`, "nothing is scheduled")
}

package redisdelaytest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// TestADebouncedDocumentRepublishedAcrossAcksInTheWindowDeliversEveryRoundsLastState republishes
// a document every 200 ms of virtual time for 5 s, with a delay of 300 ms and a debounce max
// wait of 600 ms, in the first minute of its topic (the new-group window is open all along),
// while its consumer group acks each delivery: each ack frees the key, so the next publish
// starts a new round, and every round delivers the last state it stored.
func TestADebouncedDocumentRepublishedAcrossAcksInTheWindowDeliversEveryRoundsLastState(t *testing.T) {
	const every, after, maxWait, run = 200 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond, 5 * time.Second
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	q.Consume("search.reindex", "indexer")
	var want []string // per round, the payload of its last Scheduled or Replaced publish
	var letters []byte
	for i := 0; time.Duration(i)*every < run; i++ {
		payload := fmt.Sprint(i)
		msg := redisdelay.WithDebounce(message.NewMessage(watermill.NewUUID(), []byte(payload)), "doc-7", maxWait)
		delay.Message(msg, delay.For(after))
		outcomes, err := q.Publisher().PublishWithResult("search.reindex", msg)
		if err != nil {
			t.Fatal(err)
		}
		switch outcomes[0] {
		case redisdelay.OutcomeScheduled:
			want, letters = append(want, payload), append(letters, 's')
		case redisdelay.OutcomeReplaced:
			want[len(want)-1], letters = payload, append(letters, 'r')
		default:
			letters = append(letters, 'd')
		}
		q.Advance(every)
	}
	q.Advance(maxWait)
	var got []string
	for _, d := range q.Received("indexer") {
		got = append(got, string(d.Payload))
	}
	t.Logf("outcomes %s, delivered %v", letters, got)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want the last state of each round %v (outcomes %s)", got, want, letters)
	}
	if rounds := run / (maxWait + every); len(want) < int(rounds) {
		t.Fatalf("%d rounds, want at least %d: each ack frees the key (outcomes %s)", len(want), rounds, letters)
	}
}

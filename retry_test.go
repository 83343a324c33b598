package redisdelay

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
)

func TestNackDecisionFollowsAttemptsChangesAndDelayMetadata(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msg := func(edit func(*message.Message)) *message.Message {
		m := message.NewMessage("u", []byte("p"))
		m.Metadata.Set("k", "v")
		if edit != nil {
			edit(m)
		}
		return m
	}
	backoff := ConstantBackoff(7 * time.Second)
	for _, tc := range []struct {
		name        string
		attempt     int64
		maxAttempts int
		original    *message.Message
		delivered   *message.Message
		want        nackDecision
		badDelay    bool
	}{
		{name: "unchanged: backoff", attempt: 1, maxAttempts: 3, original: msg(nil), delivered: msg(nil), want: nackDecision{delay: 7 * time.Second}},
		{name: "last attempt: dead letter", attempt: 3, maxAttempts: 3, original: msg(nil), delivered: msg(nil), want: nackDecision{deadLetter: true}},
		{name: "past the last attempt: dead letter", attempt: 4, maxAttempts: 3, original: msg(nil), delivered: msg(nil), want: nackDecision{deadLetter: true}},
		{name: "unlimited: never a dead letter", attempt: 1000, maxAttempts: UnlimitedAttempts, original: msg(nil), delivered: msg(nil), want: nackDecision{delay: 7 * time.Second}},
		{name: "payload changed: stored, backoff", attempt: 1, maxAttempts: 3, original: msg(nil),
			delivered: msg(func(m *message.Message) { m.Payload = []byte("q") }), want: nackDecision{delay: 7 * time.Second, changed: true}},
		{name: "DelayOnError metadata decides", attempt: 2, maxAttempts: 3, original: msg(nil),
			delivered: msg(func(m *message.Message) {
				m.Metadata.Set(delay.DelayedForKey, "90s")
			}), want: nackDecision{delay: 90 * time.Second, changed: true}},
		{name: "bad delay metadata: backoff", attempt: 2, maxAttempts: 3, original: msg(nil),
			delivered: msg(func(m *message.Message) { m.Metadata.Set(delay.DelayedForKey, "soon") }),
			want:      nackDecision{delay: 7 * time.Second, changed: true}, badDelay: true},
		{name: "undecodable original: backoff", attempt: 1, maxAttempts: 3, original: nil, delivered: msg(nil), want: nackDecision{delay: 7 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kept received // what the consumer read when it handed the message out
			if tc.original != nil {
				kept = receivedOptions(tc.original.Copy(), "", false)
			}
			got := decideNack(tc.attempt, tc.maxAttempts, backoff, kept, tc.original, tc.delivered, now, false)
			assert.Equal(t, tc.badDelay, got.badDelay != nil, "badDelay %v", got.badDelay)
			got.badDelay = nil
			assert.Equal(t, tc.want, got)
		})
	}
}

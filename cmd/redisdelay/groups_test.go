package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestWithoutGroupATopicWithOneGroupUsesIt(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	const checks = "order.payment-check"
	q.register(checks, "order-service")
	q.schedule(checks, newMessage("order-42", "a"))

	var page pageView
	q.json(&page, "list", "--topic", checks, "--state", "scheduled")
	require.Len(t, page.Messages, 1)
	assert.Equal(t, "order-service", page.Messages[0].Group)
	var shown messageView
	q.json(&shown, "show", "--topic", checks, "--key", "order-42")
	assert.Equal(t, "order-service", shown.Group)
	var outcome outcomeView
	q.json(&outcome, "run-now", "--topic", checks, "--ref", page.Messages[0].Ref)
	assert.Equal(t, map[string]string{"order-service": "applied"}, outcome.Groups)
	assert.Contains(t, q.ok("pause", "--topic", checks), "Group order-service on topic order.payment-check is paused.")
	assert.True(t, q.stats(checks, "order-service").Paused)
	r := q.run("n\n", "purge", "--topic", checks, "--state", "due")
	assert.Contains(t, r.stderr, "Purge the due messages of group order-service on topic order.payment-check? [y/N] ")
}

func TestWithoutGroupATopicWithSeveralGroupsIsAnErrorThatListsThem(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "shipping", "billing", "audit")
	q.schedule(topic, newMessage("order-1", "a"))
	var page pageView
	q.json(&page, "list", "--topic", topic, "--group", "billing", "--state", "scheduled")
	require.Len(t, page.Messages, 1)

	const want = `redisdelay: topic "orders" has consumer groups audit, billing, shipping; pass --group to name one` + "\n"
	for _, args := range [][]string{
		{"list", "--topic", topic, "--state", "scheduled"},
		{"show", "--topic", topic, "--key", "order-1"},
		{"show", "--topic", topic, "--ref", page.Messages[0].Ref},
		{"cancel", "--topic", topic, "--ref", page.Messages[0].Ref, "--yes"},
		{"reschedule", "--topic", topic, "--ref", page.Messages[0].Ref, "--in", "1m"},
		{"run-now", "--topic", topic, "--ref", page.Messages[0].Ref},
		{"requeue", "--topic", topic, "--all", "--yes"},
		{"purge", "--topic", topic, "--state", "scheduled", "--yes"},
		{"pause", "--topic", topic}, {"resume", "--topic", topic},
		{"remove-group", "--topic", topic, "--yes"},
	} {
		r := q.run("", args...)
		assert.Equal(t, 1, r.code, args)
		assert.Equal(t, want, r.stderr, args)
	}
	for _, g := range []string{"audit", "billing", "shipping"} {
		assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-1", g).State, "nothing changed in %s", g)
		assert.False(t, q.stats(topic, g).Paused)
	}
}

func TestWithoutGroupATopicWithNoGroupIsAnErrorThatSaysSo(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.schedule("signups", newMessage("signup-1", "a"))

	r := q.run("", "list", "--topic", "signups", "--state", "scheduled")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: topic "signups" has no consumer group; pass --group, or --parked for the messages that wait for its first group`+"\n", r.stderr)
	r = q.run("", "pause", "--topic", "signups")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: topic "signups" has no consumer group; pass --group`+"\n", r.stderr)
	r = q.run("", "list", "--topic", "nowhere", "--state", "scheduled")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: topic "nowhere": not found`+"\n", r.stderr)
}

func TestRemoveGroupNeedsTheGroupNamedEvenOnATopicWithOne(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "billing")
	q.schedule(topic, newMessage("order-1", "a"))

	r := q.run("", "remove-group", "--topic", topic, "--yes")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: topic "orders" has consumer group billing; pass --group to name one`+"\n", r.stderr)
	assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-1", "billing").State, "the group is still there")
	assert.Contains(t, q.ok("remove-group", "--topic", topic, "--group", "billing", "--yes"), "Removed group billing from topic orders")
}

package main

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestStatusShowsAKeyInEveryGroupOfTheTopic(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	register := func(groups ...string) { // with no new-group window: a later group never has the message
		for _, g := range groups {
			require.NoError(t, q.subscriber(redisdelay.SubscriberConfig{ConsumerGroup: g, NewGroupWindow: -1}).SubscribeInitialize(topic))
		}
	}
	register("billing", "packing", "shipping")
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: q.client, KeyRetention: time.Hour}, nil)
	require.NoError(t, err)
	msg := newMessage("order-1", "a")
	delay.Message(msg, delay.For(time.Hour))
	require.NoError(t, pub.Publish(topic, msg))
	register("audit") // after the message: it never had it
	ref := func(g, state string) string {
		var page pageView
		q.json(&page, "list", "--topic", topic, "--group", g, "--state", state)
		require.Len(t, page.Messages, 1, g)
		return page.Messages[0].Ref
	}
	billingRef := ref("billing", "scheduled")
	q.ok("cancel", "--topic", topic, "--group", "packing", "--ref", ref("packing", "scheduled"), "--yes")
	held := q.hold("shipping", ref("shipping", "scheduled"))
	defer held.Ack()
	shippingRef := ref("shipping", "in-flight")

	var v keyStatusView
	q.json(&v, "status", "--topic", topic, "--key", "order-1")
	assert.Equal(t, [3]any{topic, "order-1", true}, [3]any{v.Topic, v.Key, v.Live})
	require.Len(t, v.Groups, 4)
	byGroup := map[string]keyGroupView{}
	for _, g := range v.Groups {
		byGroup[g.Group] = g
	}
	assert.Equal(t, [3]string{"scheduled", billingRef, ""}, [3]string{byGroup["billing"].State, byGroup["billing"].Ref, byGroup["billing"].Reason})
	assert.WithinDuration(t, time.Now().Add(time.Hour), deref(byGroup["billing"].DueAt), time.Minute)
	assert.Equal(t, [2]string{"in-flight", shippingRef}, [2]string{byGroup["shipping"].State, byGroup["shipping"].Ref})
	assert.Equal(t, 1, byGroup["shipping"].Attempt)
	assert.NotNil(t, byGroup["shipping"].LeaseDeadline)
	assert.Equal(t, [2]string{"cancelled", ""}, [2]string{byGroup["packing"].State, byGroup["packing"].Ref})
	assert.NotNil(t, byGroup["packing"].FinishedAt)
	assert.Equal(t, keyGroupView{Group: "audit", State: "finished"}, byGroup["audit"], "a later group is done with it")

	out := q.ok("status", "--topic", topic, "--key", "order-1")
	assert.Regexp(t, `(?m)^GROUP\s+STATE\s+DUE AT\s+LEASE DEADLINE\s+ATTEMPT\s+REF\s+FINISHED AT\s+REASON$`, out)
	assert.Regexp(t, `(?m)^audit\s+finished\s+-\s+-\s+0\s+-\s+-\s+-$`, out)

	// Once every group is done with it, a group registered since knows nothing of it.
	q.ok("cancel", "--topic", topic, "--key", "order-1", "--yes")
	register("late")
	var after keyStatusView
	q.json(&after, "status", "--topic", topic, "--key", "order-1")
	assert.False(t, after.Live)
	require.Len(t, after.Groups, 5)
	assert.Equal(t, keyGroupView{Group: "late", State: "not-found"}, after.Groups[2])
	assert.Equal(t, [2]string{"billing", "cancelled"}, [2]string{after.Groups[1].Group, after.Groups[1].State})
	assert.Regexp(t, `(?m)^billing\s+scheduled\s+\d{4}-\S+\s+-\s+0\s+`+billingRef+`\s+-\s+-$`, out)
	assert.Regexp(t, `(?m)^packing\s+cancelled\s+-\s+-\s+0\s+-\s+\d{4}-\S+\s+-$`, out)
	assert.Regexp(t, `(?m)^shipping\s+in-flight\s+-\s+\d{4}-\S+\s+1\s+`+shippingRef+`\s+-\s+-$`, out)
}

func TestStatusOfAnUnknownKeyOrTopicIsNotFound(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, "billing")
	require.NoError(t, q.pub.Publish("signups", newMessage("signup-1", "a")))

	r := q.run("", "status", "--topic", topic, "--key", "nope")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: key "nope" on topic "orders": not found`+"\n", r.stderr)
	r = q.run("", "status", "--topic", "nowhere", "--key", "nope")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: topic "nowhere": not found`+"\n", r.stderr)

	var parked keyStatusView
	q.json(&parked, "status", "--topic", "signups", "--key", "signup-1")
	require.Len(t, parked.Groups, 1)
	assert.Equal(t, [3]any{"", "scheduled", true}, [3]any{parked.Groups[0].Group, parked.Groups[0].State, parked.Groups[0].Parked})
	assert.Regexp(t, `(?m)^\(parked\)\s+scheduled\s+\d{4}-`, q.ok("status", "--topic", "signups", "--key", "signup-1"))
}

// hold makes the message ref of group due, then has a subscriber of group take it and keep it
// in flight; the caller acks it.
func (q *queue) hold(group, ref string) *message.Message {
	q.t.Helper()
	q.ok("run-now", "--topic", topic, "--group", group, "--ref", ref)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	q.t.Cleanup(cancel)
	messages, err := q.subscriber(redisdelay.SubscriberConfig{ConsumerGroup: group}).Subscribe(ctx, topic)
	require.NoError(q.t, err)
	select {
	case msg := <-messages:
		return msg
	case <-ctx.Done():
		q.t.Fatalf("the message %s of %s was not delivered", ref, group)
		return nil
	}
}

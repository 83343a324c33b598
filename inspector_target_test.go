package redisdelay_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// listedState is one message that List returned: the topic and group it was listed under,
// the state it was listed in, and what it is.
type listedState struct {
	name, topic, group string
	state              redisdelay.State
}

// TestEveryRefListReturnsIsTakenByTheMethodsItsDocsName lists a message in every state List
// shows (scheduled in the due set, scheduled in the compact tier, an open batch, due, in
// flight, dead-lettered, parked) and feeds each returned ref back to the methods
// MessageInfo.Ref names: ByRef to Message, Status and Cancel; ByRef of a parked message to
// Message and Status, while Cancel refuses it; ByDeadLetter to Message, and the ref to Requeue.
func TestEveryRefListReturnsIsTakenByTheMethodsItsDocsName(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		queued, worked, parked := newTopic(), newTopic(), newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) {
			c.CompactHorizon = 20 * time.Millisecond
			c.Batching = map[string]redisdelay.BatchConfig{queued: {MaxItems: 100, MaxWait: time.Hour}}
		})
		in := newInspector(t, b, 1)
		group := redisdelay.DefaultConsumerGroup

		// queued: a group that consumes nothing holds a keyed message in its due set, one in its
		// compact tier, an open batch and a due message.
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(queued))
		sched := redisdelay.WithKey(dueAt(1, time.Now().Add(time.Hour)), "sched")
		require.NoError(t, pub.Publish(queued, sched, dueAt(2, time.Now().Add(time.Hour)), message.NewMessage("3", nil)))
		require.NoError(t, pub.Publish(queued, parcel("north", 1)))
		require.Equal(t, int64(1), statsOf(t, in, queued, group).Compact, "message 2 waits in the compact tier")

		// worked: one message dead-lettered after its only attempt, one held by the handler.
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 1 }), worked)
		require.NoError(t, pub.Publish(worked, message.NewMessage("dead", nil)))
		receive(t, ch, 5*time.Second).Nack()
		require.NoError(t, pub.Publish(worked, message.NewMessage("held", nil)))
		held := receive(t, ch, 5*time.Second)
		t.Cleanup(func() { held.Ack() })

		// parked: a topic with no group yet.
		require.NoError(t, pub.Publish(parked, message.NewMessage("parked", nil)))

		listed := map[listedState]redisdelay.MessageInfo{}
		for _, l := range []listedState{
			{"due set", queued, group, redisdelay.StateScheduled},
			{"due", queued, group, redisdelay.StateDue},
			{"in flight", worked, group, redisdelay.StateInFlight},
			{"dead-lettered", worked, group, redisdelay.StateDeadLettered},
			{"parked", parked, redisdelay.ParkedGroup, redisdelay.StateDue},
		} {
			require.Eventually(t, func() bool {
				page, err := in.List(ctx, l.topic, l.group, redisdelay.ListOptions{State: l.state})
				require.NoError(t, err)
				for _, m := range page.Messages {
					name := l.name
					switch {
					case m.Metadata[redisdelay.BatchKeyMetadataKey] != "":
						name = "open batch"
					case m.UUID == "2":
						name = "compact tier"
					}
					listed[listedState{name, l.topic, l.group, l.state}] = m
				}
				return len(page.Messages) > 0
			}, 5*time.Second, 10*time.Millisecond, "%s listed", l.name)
		}
		require.Len(t, listed, 7, "every state listed: %v", listed)
		st, err := in.Status(ctx, queued, redisdelay.ByKey("sched").InGroup(group))
		require.NoError(t, err)
		assert.Equal(t, []string{group}, slices.Collect(maps.Keys(st.Groups)), "InGroup keeps that group")
		assert.Equal(t, redisdelay.StateScheduled, st.Groups[group].State)
		_, err = in.Status(ctx, queued, redisdelay.ByKey("sched").InGroup("unknown"))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)

		for l, m := range listed {
			require.NotEmpty(t, m.Ref, l.name)
			if l.state == redisdelay.StateDeadLettered {
				assertDeadLetterRef(t, in, l, m)
				continue
			}
			target := redisdelay.ByRef(l.group, m.Ref)
			got, err := in.Message(ctx, l.topic, target)
			require.NoError(t, err, l.name)
			assert.Equal(t, m.UUID, got.UUID, l.name)
			assert.Equal(t, m.ID, got.ID, l.name)
			st, err := in.Status(ctx, l.topic, target)
			require.NoError(t, err, l.name)
			want := redisdelay.StateScheduled
			if l.state == redisdelay.StateInFlight {
				want = redisdelay.StateInFlight
			}
			assert.Equal(t, want, st.Groups[l.group].State, l.name)
			assert.True(t, st.Live, l.name)

			res, err := in.Cancel(ctx, l.topic, target)
			if l.group == redisdelay.ParkedGroup {
				assert.ErrorIs(t, err, redisdelay.ErrUnsupportedTarget, "a parked message is no group's: cancelled by key only")
				continue
			}
			require.NoError(t, err, l.name)
			want2 := redisdelay.OutcomeApplied
			if l.state == redisdelay.StateInFlight {
				want2 = redisdelay.OutcomeInFlight
			}
			assert.Equal(t, map[string]redisdelay.Outcome{l.group: want2}, res.Groups, l.name)
			if l.state != redisdelay.StateInFlight {
				_, err = in.Message(ctx, l.topic, target)
				assert.ErrorIs(t, err, redisdelay.ErrNotFound, "%s: cancelled", l.name)
			}
		}
	})
}

// assertDeadLetterRef feeds the ref of a listed dead letter to Message (ByDeadLetter) and
// Requeue, and checks that the actions refuse it.
func assertDeadLetterRef(t *testing.T, in *redisdelay.Inspector, l listedState, m redisdelay.MessageInfo) {
	ctx := context.Background()
	target := redisdelay.ByDeadLetter(l.group, m.Ref)
	got, err := in.Message(ctx, l.topic, target)
	require.NoError(t, err)
	assert.Equal(t, "dead", got.UUID)
	assert.Equal(t, redisdelay.StateDeadLettered, got.State)
	_, err = in.Cancel(ctx, l.topic, target)
	assert.ErrorIs(t, err, redisdelay.ErrUnsupportedTarget, "a dead letter is requeued or purged, not cancelled")
	_, err = in.Status(ctx, l.topic, target)
	assert.ErrorIs(t, err, redisdelay.ErrUnsupportedTarget)
	n, err := in.Requeue(ctx, l.topic, l.group, m.Ref)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "requeued by its ref")
}

func TestTargetsAnOperationDoesNotTakeAreRefusedByName(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		in := newInspector(t, b, 1)
		for _, c := range []struct {
			call func() error
			want string
		}{
			{func() error { _, err := in.Cancel(ctx, topic, redisdelay.Target{}); return err }, "cancel no target"},
			{func() error { _, err := in.Cancel(ctx, topic, redisdelay.ByKey("k").InGroup("g")); return err }, `cancel key "k" in group "g"`},
			{func() error { _, err := in.RunNow(ctx, topic, redisdelay.ByDeadLetter("g", "0/x")); return err }, `run now dead letter "0/x" of group "g"`},
			{func() error { _, err := in.Reschedule(ctx, topic, redisdelay.ByBatchKey("b"), time.Now()); return err }, `reschedule open batch of batch key "b"`},
			{func() error { _, err := in.Status(ctx, topic, redisdelay.ByBatchKey("b")); return err }, `status of open batch of batch key "b"`},
			{func() error { _, err := in.Message(ctx, topic, redisdelay.ByKey("k")); return err }, `read key "k"`},
		} {
			err := c.call()
			assert.ErrorIs(t, err, redisdelay.ErrUnsupportedTarget, c.want)
			assert.ErrorContains(t, err, c.want)
			assert.ErrorContains(t, err, topic)
		}
	})
}

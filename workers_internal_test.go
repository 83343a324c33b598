package redisdelay

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAWorkerRecordListsAtMostMaxWorkerSubscriptions checks that a record stays small whatever
// a Subscriber subscribes to: the first MaxWorkerSubscriptions in order, and a count of the
// rest; several Subscribe calls to one topic are one subscription.
func TestAWorkerRecordListsAtMostMaxWorkerSubscriptions(t *testing.T) {
	w := newWorker(SubscriberConfig{Consumer: "c-1", LeaseTimeout: time.Minute, kind: WorkerSubscriber})
	assert.True(t, w.subscribed(WorkerSubscription{Topic: "t-000", Group: "g"}), "the first starts the heartbeat")
	assert.False(t, w.subscribed(WorkerSubscription{Topic: "t-000", Group: "g"}))
	for i := 1; i < MaxWorkerSubscriptions+5; i++ {
		w.subscribed(WorkerSubscription{Topic: fmt.Sprintf("t-%03d", i), Group: "g"})
	}
	w.held.Store(7)
	var rec workerRecord
	require.NoError(t, json.Unmarshal([]byte(w.snapshot()), &rec))
	require.Len(t, rec.Subscriptions, MaxWorkerSubscriptions)
	assert.Equal(t, "t-000", rec.Subscriptions[0].Topic)
	assert.Equal(t, fmt.Sprintf("t-%03d", MaxWorkerSubscriptions-1), rec.Subscriptions[MaxWorkerSubscriptions-1].Topic)
	assert.Equal(t, 5, rec.Omitted)
	assert.Equal(t, 7, rec.InFlight)
	assert.EqualValues(t, 60000, rec.LeaseMs)
	assert.Equal(t, "c-1", rec.Consumer)

	w.unsubscribed(WorkerSubscription{Topic: "t-000", Group: "g"})
	require.NoError(t, json.Unmarshal([]byte(w.snapshot()), &rec))
	assert.Equal(t, "t-000", rec.Subscriptions[0].Topic, "one of its two Subscribe calls still runs")
	w.unsubscribed(WorkerSubscription{Topic: "t-000", Group: "g"})
	require.NoError(t, json.Unmarshal([]byte(w.snapshot()), &rec))
	assert.Equal(t, "t-001", rec.Subscriptions[0].Topic)
	assert.Equal(t, 4, rec.Omitted)
}

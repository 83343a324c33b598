package redisdelay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// publishAfter publishes one message on topic for each delay, due that long from now (at once for
// 0).
func publishAfter(t *testing.T, pub *redisdelay.Publisher, topic string, delays ...time.Duration) {
	t.Helper()
	msgs := make([]*message.Message, len(delays))
	for n, d := range delays {
		msgs[n] = message.NewMessage("m"+strconv.Itoa(n), []byte("payload"))
		if d > 0 {
			delay.Message(msgs[n], delay.For(d))
		}
	}
	require.NoError(t, pub.Publish(topic, msgs...))
}

// A forecast counts each message in the bucket of its due time, summed over the partitions:
// those due already under Due, those past the last bucket under Later.
func TestForecastCountsEachMessageInTheBucketOfItsDueTime(t *testing.T) {
	for _, partitions := range []int{1, 3} {
		t.Run(strconv.Itoa(partitions)+"-partitions", func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				topic := newTopic()
				pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, Partitions: partitions}, nil)
				require.NoError(t, err)
				t.Cleanup(func() { _ = pub.Close() })
				in := newInspector(t, b, partitions)
				require.NoError(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = partitions }).SubscribeInitialize(topic))
				before := time.Now()
				// Due times at least 10 s from each bucket's edge: 1 due now, 2 in the first
				// minute, none in the second, 4 in the third, 1 after the fifth.
				publishAfter(t, pub, topic, 0, 20*time.Second, 40*time.Second,
					2*time.Minute+15*time.Second, 2*time.Minute+20*time.Second, 2*time.Minute+30*time.Second, 2*time.Minute+45*time.Second,
					10*time.Minute)

				f, err := in.Forecast(context.Background(), topic, redisdelay.DefaultConsumerGroup, time.Minute, 5)
				require.NoError(t, err)
				assert.Equal(t, []int64{2, 0, 4, 0, 0}, f.Counts)
				assert.Equal(t, int64(1), f.Due)
				assert.Equal(t, int64(1), f.Later)
				assert.Equal(t, time.Minute, f.Bucket)
				assert.WithinRange(t, f.Start, before.Add(-time.Second), time.Now().Add(time.Second), "the Redis clock now")
				assert.Equal(t, f.Start.Add(5*time.Minute), f.End())
				assert.Equal(t, [2]string{topic, redisdelay.DefaultConsumerGroup}, [2]string{f.Topic, f.Group})
			})
		})
	}
}

// The parked messages of a topic with no consumer group have a forecast, under ParkedGroup;
// once a group registers, they are the group's.
func TestForecastOfParkedMessagesUntilAGroupRegisters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		publishAfter(t, pub, topic, 30*time.Second, 90*time.Second, 100*time.Second)

		f, err := in.Forecast(context.Background(), topic, redisdelay.ParkedGroup, time.Minute, 3)
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 2, 0}, f.Counts)
		_, err = in.Forecast(context.Background(), topic, redisdelay.DefaultConsumerGroup, time.Minute, 3)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound, "no group yet")

		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		f, err = in.Forecast(context.Background(), topic, redisdelay.DefaultConsumerGroup, time.Minute, 3)
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 2, 0}, f.Counts, "the first group took the parked messages")
		_, err = in.Forecast(context.Background(), topic, redisdelay.ParkedGroup, time.Minute, 3)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound, "nothing is parked on a topic with a group")
	})
}

func TestForecastRefusesBucketsOutOfRange(t *testing.T) {
	b := embeddedRedis(t)
	in := newInspector(t, b, 1)
	topic := newTopic()
	require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
	for _, c := range []struct {
		bucket time.Duration
		n      int
		want   string
	}{
		{time.Minute, 0, "0 buckets, want 1 to 288"},
		{time.Minute, redisdelay.MaxForecastBuckets + 1, "289 buckets"},
		{time.Nanosecond, 10, "bucket is 1ns, want 1µs"},
		{redisdelay.MaxForecastBucket + time.Hour, 10, "bucket is 8785h0m0s"},
	} {
		_, err := in.Forecast(context.Background(), topic, redisdelay.DefaultConsumerGroup, c.bucket, c.n)
		assert.ErrorContains(t, err, c.want)
	}
	f, err := in.Forecast(context.Background(), topic, redisdelay.DefaultConsumerGroup, time.Microsecond, redisdelay.MaxForecastBuckets)
	require.NoError(t, err, "the bounds themselves are fine")
	assert.Len(t, f.Counts, redisdelay.MaxForecastBuckets)
}

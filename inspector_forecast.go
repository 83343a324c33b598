package redisdelay

// This file owns Inspector.Forecast: a group's messages counted by the bucket of their due
// time.

import (
	"context"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// MaxForecastBuckets bounds the buckets of one Forecast: a day of 5-minute buckets.
const MaxForecastBuckets = 288

// MaxForecastBucket bounds the width of one Forecast bucket.
const MaxForecastBucket = 366 * 24 * time.Hour

// Forecast is how many of a consumer group's messages fall due when, as Inspector.Forecast
// counts them. Times are on the Redis clock.
type Forecast struct {
	Topic, Group string
	// Start is the start of the first bucket: the Redis clock when the counts were taken.
	Start time.Time
	// Bucket is the width of each bucket.
	Bucket time.Duration
	// Counts[k] is how many messages fall due in [Start + k·Bucket, Start + (k+1)·Bucket).
	Counts []int64
	// Due is how many were due already at Start and not claimed (GroupStats.Due); Later is how
	// many fall due after the last bucket.
	Due, Later int64
}

// End returns the end of the last bucket.
func (f Forecast) End() time.Time { return f.Start.Add(time.Duration(len(f.Counts)) * f.Bucket) }

// Forecast counts the messages of consumer group on topic that fall due in each of n
// consecutive buckets of width bucket, from now on the Redis clock: it shows a burst of
// messages about to come due before it arrives. Messages in flight are not counted; a message
// that is nacked, or rescheduled, moves to its new due time. For ParkedGroup, it counts the
// parked messages of a topic that has no consumer group. The messages of the compact tier
// (PublisherConfig.CompactHorizon) count too: a time bucket of the tier whose span falls in one
// forecast bucket counts whole (LLEN), one whose span crosses forecast buckets message by
// message by due time (LRANGE, up to store.MaxTierEntriesRead, 10,000, entries per partition;
// past that at its start); of the first store.MaxTierBucketsCounted (1,000) tier buckets, the
// messages of any further ones count in Later. Up to three more pipelined round trips.
//
// bucket is from 1 µs to MaxForecastBucket, truncated to whole microseconds (the precision of
// due times); n is from 1 to MaxForecastBuckets. The call reads the Redis clock (TIME), then
// sends each partition n+4 commands of O(log N) (ZCOUNT and a one-member ZRANGE and
// ZRANGEBYSCORE) in one pipelined round trip, 16 partitions at a time. The counts of a
// partition are not one snapshot: each command sees the set as it is when it runs.
//
// Errors: an error for a bucket or n out of range; an error wrapping ErrNotFound for an unknown
// topic or group, or for ParkedGroup on a topic with a consumer group; or the Redis error;
// within OperationTimeout.
func (i *Inspector) Forecast(ctx context.Context, topic, group string, bucket time.Duration, n int) (Forecast, error) {
	f := Forecast{Topic: topic, Group: group, Bucket: bucket.Truncate(time.Microsecond)}
	if f.Bucket < time.Microsecond || f.Bucket > MaxForecastBucket {
		return f, fmt.Errorf("redisdelay: forecast of topic %s: bucket is %s, want 1µs to %s", quote(topic), bucket, MaxForecastBucket)
	}
	if n < 1 || n > MaxForecastBuckets {
		return f, fmt.Errorf("redisdelay: forecast of topic %s: %d buckets, want 1 to %d", quote(topic), n, MaxForecastBuckets)
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.groupOrParked(ctx, topic, group)
	if err != nil {
		return f, err
	}
	wrap := func(err error) error {
		return fmt.Errorf("redisdelay: forecast of group %s on topic %s: %w", quote(group), quote(topic), err)
	}
	nowUs, err := i.store.Clock(ctx)
	if err != nil {
		return f, wrap(err)
	}
	counts := make([]store.DueCounts, info.Partitions)
	err = forEachConcurrently(ctx, info.Partitions, func(ctx context.Context, p int) error {
		var err error
		counts[p], err = i.store.CountByDue(ctx, dueSet(store.Partition{Topic: topic, N: p}.Of(group)), nowUs, f.Bucket.Microseconds(), n)
		return err
	})
	if err != nil {
		return f, wrap(err)
	}
	f.Start, f.Counts = time.UnixMicro(nowUs), make([]int64, n)
	for _, c := range counts {
		f.Due += c.Before
		f.Later += c.After
		for k, v := range c.Buckets {
			f.Counts[k] += v
		}
	}
	return f, nil
}

package schedule_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// beyond is a little more than MaxDelay: eleven years.
const beyond = redisdelay.MaxDelay + 365*24*time.Hour

// TestBackfillPublishesEveryTickAcrossGapsOfMoreThanFiveYears: 29 February skips 1900, an
// 8-year gap; every tick of the range is published.
func TestBackfillPublishesEveryTickAcrossGapsOfMoreThanFiveYears(t *testing.T) {
	e := newSchedulerEnv(t, embeddedRedis(t))
	ctx := context.Background()
	s := e.scheduler(t, nil)
	_, err := s.Put(ctx, schedule.Schedule{Name: "leap", Spec: "0 0 29 2 *", Topic: "leaps"})
	require.NoError(t, err)
	res, err := s.Backfill(ctx, "leap", utc("1880-01-01T00:00:00Z"), utc("1920-01-01T00:00:00Z"))
	require.NoError(t, err)
	assert.Equal(t, schedule.BackfillResult{Published: 9}, res, "1880, 84, 88, 92, 96, 1904, 08, 12, 16")

	_, err = s.Put(ctx, schedule.Schedule{Name: "nye", Spec: "59 23 31 12 *", TimeZone: "Pacific/Apia", Topic: "leaps"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		res, err = s.Backfill(ctx, "nye", utc("2011-01-01T00:00:00Z"), utc("2013-01-01T00:00:00Z"))
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
		assert.Equal(t, schedule.BackfillResult{Published: 3}, res, "over the day Samoa skipped")
	case <-time.After(5 * time.Second):
		t.Fatal("Backfill over the day Samoa skipped did not return")
	}
}

func TestBackfillRefusesARangeBeyondMaxDelayAndStopsWithItsContext(t *testing.T) {
	e := newSchedulerEnv(t, embeddedRedis(t))
	ctx := context.Background()
	s := e.scheduler(t, nil)
	_, err := s.Put(ctx, schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: "hours"})
	require.NoError(t, err)
	_, err = s.Backfill(ctx, "hourly", time.Now(), time.Now().Add(beyond))
	require.ErrorIs(t, err, redisdelay.ErrBeyondMaxDelay)
	require.ErrorIs(t, err, schedule.ErrInvalid)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	res, err := s.Backfill(cancelled, "hourly", time.Now().Add(-24*time.Hour), time.Now())
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	assert.Zero(t, res)
}

// TestBackfillThatFailsSaysHowManyTicksItPublished: the second of two publish calls fails; the
// error and the result say that the first 100 of the 151 ticks were published.
func TestBackfillThatFailsSaysHowManyTicksItPublished(t *testing.T) {
	b := embeddedRedis(t)
	var armed atomic.Bool
	var calls atomic.Int64
	client := faultyClient(t, b, scriptFault{match: isPublishCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if armed.Load() && calls.Add(1) == 2 {
			return errors.New("injected: connection reset")
		}
		return next(ctx, cmd)
	}})
	e := newSchedulerEnv(t, backend{name: b.name, client: client, miniredis: b.miniredis})
	ctx := context.Background()
	s := e.scheduler(t, nil)
	_, err := s.Put(ctx, schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: "hours"})
	require.NoError(t, err)
	armed.Store(true)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := s.Backfill(ctx, "hourly", from, from.Add(150*time.Hour))
	require.ErrorContains(t, err, "100 of 151 ticks published before")
	assert.ErrorContains(t, err, "injected")
	assert.Equal(t, schedule.BackfillResult{Published: 100}, res)
}

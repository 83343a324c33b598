package schedule_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// isPutCall matches periodic_put.lua, whose second key is the schedule index.
func isPutCall(keys []string) bool { return len(keys) > 1 && strings.HasSuffix(keys[1], ":schedules") }

// TestPutFirstTickIsTheFirstAfterCreated holds Put's write until the Redis clock passed a
// tick of an `@every 1s` schedule, one that Put may have computed as the first: the first
// tick is still the first after Created (and after Updated, on an update), the time Put
// computed it from. Were Created the moment of the write, the first tick would come before
// it, and a reader counting the ticks after Created would count one tick fewer than Published
// (the kill test's "Published one ahead").
func TestPutFirstTickIsTheFirstAfterCreated(t *testing.T) {
	b := realRedis(t)
	ctx := context.Background()
	client := faultyClient(t, b, scriptFault{match: isPutCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		start, err := b.client.Time(ctx).Result()
		if err != nil {
			return err
		}
		boundary := start.Truncate(time.Second).Add(time.Second)
		for { // the Redis clock passing a whole second is the scenario
			now, err := b.client.Time(ctx).Result()
			if err != nil {
				return err
			}
			if !now.Before(boundary) {
				return next(ctx, cmd)
			}
			time.Sleep(boundary.Sub(now))
		}
	}})
	e := newSchedulerEnv(t, backend{name: b.name, client: client})
	s := e.scheduler(t, nil)
	sch := schedule.Schedule{Name: "straddle", Spec: "@every 1s", Topic: "ticks"}
	for _, want := range []schedule.PutOutcome{schedule.Created, schedule.Updated} {
		outcome, err := s.Put(ctx, sch)
		require.NoError(t, err)
		require.Equal(t, want, outcome)
		info, err := schedule.Get(ctx, e.inspector(t), "straddle")
		require.NoError(t, err)
		since := info.Created
		if want == schedule.Updated {
			since = info.Updated
		}
		first, err := sch.NextTicks(since, 1)
		require.NoError(t, err)
		assert.Equal(t, first[0].UnixMilli(), info.Pending.UnixMilli(), "%s: the first tick is the first after %s", want, since.UTC().Format(time.RFC3339Nano))
		sch.Payload = []byte("changed") // the second Put updates the definition
	}
}

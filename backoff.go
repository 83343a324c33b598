package redisdelay

// This file owns the nack backoffs: the Backoff interface and its exponential, constant and
// scheduled forms.

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff decides how long a nacked message waits before it is due again.
type Backoff interface {
	// NackDelay returns the delay, relative to the Redis clock at the time of the Nack, after
	// the given failed attempt. attempt is 1 for the first delivery of a message.
	NackDelay(attempt int) time.Duration
}

// ExponentialBackoff waits InitialInterval after the first failed attempt and Multiplier times
// longer after each further one, never more than MaxInterval, each step spread at random by
// ±RandomizationFactor (0.2 means ±20 %) so that messages that failed together do not come back
// together. The maths is github.com/cenkalti/backoff/v5's ExponentialBackOff.
type ExponentialBackoff struct {
	InitialInterval     time.Duration
	MaxInterval         time.Duration
	Multiplier          float64
	RandomizationFactor float64
}

// maxBackoffSteps bounds the work NackDelay does for a very high attempt number; any sensible
// Multiplier has reached MaxInterval long before.
const maxBackoffSteps = 64

// NackDelay implements Backoff.
func (b ExponentialBackoff) NackDelay(attempt int) time.Duration {
	e := &backoff.ExponentialBackOff{
		InitialInterval:     b.InitialInterval,
		MaxInterval:         b.MaxInterval,
		Multiplier:          b.Multiplier,
		RandomizationFactor: b.RandomizationFactor,
	}
	e.Reset()
	d := e.NextBackOff()
	for i := 1; i < min(attempt, maxBackoffSteps); i++ {
		d = e.NextBackOff()
	}
	return d
}

// ConstantBackoff waits the same time after every failed attempt. ConstantBackoff(0) makes a
// nacked message due again at once.
type ConstantBackoff time.Duration

// NackDelay implements Backoff.
func (b ConstantBackoff) NackDelay(int) time.Duration { return time.Duration(b) }

// ScheduleBackoff waits the i-th delay after the i-th failed attempt, and the last delay after
// every attempt past the end of the schedule. Combine it with MaxAttempts = MaxAttempts() to
// give up, that is dead-letter the message, once the schedule is used up.
type ScheduleBackoff []time.Duration

// NackDelay implements Backoff.
func (b ScheduleBackoff) NackDelay(attempt int) time.Duration {
	if len(b) == 0 {
		return 0
	}
	return b[min(max(attempt, 1), len(b))-1]
}

// MaxAttempts is the first delivery plus one retry per delay of the schedule.
func (b ScheduleBackoff) MaxAttempts() int { return len(b) + 1 }

// NotifyRetrySchedule is the retry schedule payment providers use for asynchronous
// notifications (webhooks): 15 s, 15 s, 30 s, 3 min, 10 min, 20 min, 30 min, 30 min, 30 min,
// 1 h, 3 h, 3 h, 3 h, 6 h, 6 h, then give up, about 24 hours and 15 retries in all. Use it as
//
//	SubscriberConfig{
//		NackBackoff: redisdelay.NotifyRetrySchedule,
//		MaxAttempts: redisdelay.NotifyRetrySchedule.MaxAttempts(), // 16
//	}
var NotifyRetrySchedule = ScheduleBackoff{
	15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, time.Hour,
	3 * time.Hour, 3 * time.Hour, 3 * time.Hour, 6 * time.Hour, 6 * time.Hour,
}

package redisdelay

// This file owns redisClock, a subscription's lower bound of the Redis clock, by which it hands
// out a message claimed ahead of its due time (see claimAhead in consumer.go) no earlier than
// that due time on the Redis clock.

import "time"

// maxClockDriftPPM is how much slower than the local monotonic clock the Redis clock may run,
// in millionths: 500, the fastest an NTP slew moves a Linux clock. A step of either clock (a
// clock set by hand, or by NTP beyond its slew) is outside this bound.
const maxClockDriftPPM = 500

// redisClock bounds the Redis clock from below from the replies of a subscription's claims: a
// claim reads the Redis clock (ClaimResult.NowUs) before its reply arrives, so when the reply
// arrives at local time recv, the Redis clock reads at least NowUs. It keeps the sample that
// bounds it the tightest, the one with the quickest reply, aging each sample at
// maxClockDriftPPM. The zero value has no sample.
type redisClock struct {
	recv  time.Time // local time of the sample's reply, with its monotonic reading
	nowUs int64     // the Redis clock the sample's claim read, Unix µs
}

// observe takes the reply of a claim that read nowUs (Unix µs, Redis clock), received at recv
// (local clock, from time.Now).
func (r *redisClock) observe(nowUs int64, recv time.Time) {
	if r.recv.IsZero() || r.leastAt(recv) <= nowUs {
		r.recv, r.nowUs = recv, nowUs
	}
}

// leastAt is the least the Redis clock can read at local time t, no earlier than the sample's
// reply: Unix µs.
func (r *redisClock) leastAt(t time.Time) int64 {
	elapsed := t.Sub(r.recv).Microseconds()
	return r.nowUs + elapsed - (elapsed*maxClockDriftPPM+999_999)/1_000_000
}

// localAt is the earliest local time at which the Redis clock surely reads dueUs (Unix µs) or
// later. It needs a sample (observe), and dueUs no earlier than the sample's.
func (r *redisClock) localAt(dueUs int64) time.Time {
	ahead := dueUs - r.nowUs
	// elapsed - elapsed*ppm/1e6 >= ahead, rounded up.
	elapsed := (ahead*1_000_000 + 1_000_000 - maxClockDriftPPM - 1) / (1_000_000 - maxClockDriftPPM)
	return r.recv.Add(time.Duration(elapsed) * time.Microsecond)
}

package clock

import "time"

// Sleeper sleeps as SleepPrecisely does, on a timerfd of its own that it keeps from sleep to
// sleep (on Linux): a claim loop that sleeps precisely for every due time and every message it
// holds then pays for arming the timer and reading it, not for making, registering and closing
// a new one each time. It is for one goroutine at a time. The zero value is ready; Close frees
// its timerfd.
type Sleeper struct {
	timer preciseTimer
}

// Sleep sleeps d (no less; a d above PreciseTail is cut to PreciseTail), as SleepPrecisely.
func (s *Sleeper) Sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	s.timer.sleep(min(d, PreciseTail))
}

// Close frees the Sleeper's timerfd; a later Sleep makes a new one.
func (s *Sleeper) Close() { s.timer.close() }

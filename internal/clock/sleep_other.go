//go:build !linux

package clock

import "time"

// sleepPrecisely sleeps d on a Go timer: there is no timerfd outside Linux.
func sleepPrecisely(d time.Duration) { time.Sleep(d) }

// preciseTimer sleeps on a Go timer: there is no timerfd outside Linux.
type preciseTimer struct{}

func (preciseTimer) sleep(d time.Duration) { time.Sleep(d) }

func (preciseTimer) close() {}

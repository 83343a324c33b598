package redisdelay

// This file lets the test kit (package redisdelaytest) set the client clock of a Publisher or
// Subscriber, through internal/clock, without a public API: production code never calls it,
// and the zero clock is time.Now.

import "github.com/watermill-redisdelay/redisdelay/internal/clock"

func init() {
	clock.Inject = func(target any, c clock.Clock) bool {
		switch t := target.(type) {
		case *Publisher:
			t.clock = c
		case *Subscriber:
			t.clock = c
		default:
			return false
		}
		return true
	}
}

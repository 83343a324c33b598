//go:build old

package main

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/watermill-redisdelay/redisdelay"
)

// probeCases of a build before the features: plain messages only, one and 100 per Publish,
// and delayed ones.
func probeCases() map[string]probeCase {
	plain := func(int, *message.Message) bool { return true }
	no := func(int, *message.Message) bool { return false }
	return map[string]probeCase{
		"plain": {perCall: 1, prepare: plain}, "plain-100": {perCall: 100, prepare: plain},
		"keyed": {perCall: 1, prepare: no}, "deadline": {perCall: 1, prepare: no},
		"debounced": {perCall: 1, prepare: no}, "batch-item": {perCall: 1, prepare: no},
		"delayed": {perCall: 1, prepare: delayed},
	}
}

// The build had no new-group window: it is neither open nor closed.
func windowSupported(window string) bool { return window == "none" }

func setWindow(*redisdelay.SubscriberConfig, string) {}

//go:build !old

package main

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/watermill-redisdelay/redisdelay"
)

// probeCases: plain messages one and 100 per Publish, and one case per feature a message can
// use, each published one per call.
func probeCases() map[string]probeCase {
	plain := func(int, *message.Message) bool { return true }
	return map[string]probeCase{
		"plain":     {perCall: 1, prepare: plain},
		"plain-100": {perCall: 100, prepare: plain},
		"delayed":   {perCall: 1, prepare: delayed},
		"keyed": {perCall: 1, prepare: func(i int, m *message.Message) bool {
			redisdelay.WithKey(m, fmt.Sprintf("order-%d", i))
			return true
		}},
		"deadline": {perCall: 1, prepare: func(i int, m *message.Message) bool {
			redisdelay.WithDeliverBy(m, time.Now().Add(time.Hour))
			return true
		}},
		"debounced": {perCall: 1, prepare: func(i int, m *message.Message) bool {
			redisdelay.WithDebounce(m, fmt.Sprintf("order-%d", i), time.Minute)
			return true
		}},
		"batch-item": {perCall: 1, items: 100, prepare: func(i int, m *message.Message) bool {
			redisdelay.WithBatchKey(m, fmt.Sprintf("area-%d", i/100))
			return true
		}, config: func(c *redisdelay.PublisherConfig, topic string) {
			if c.Batching == nil {
				c.Batching = map[string]redisdelay.BatchConfig{}
			}
			c.Batching[topic] = redisdelay.BatchConfig{MaxItems: 100, MaxWait: time.Minute}
		}},
	}
}

func windowSupported(string) bool { return true }

// setWindow opens the new-group window (the default, a minute) or closes it (none).
func setWindow(c *redisdelay.SubscriberConfig, window string) {
	if window == "closed" {
		c.NewGroupWindow = -1
	}
}

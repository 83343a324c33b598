package redisdelay

// This file owns the Layout: where a queue lives (the Redis client and the key prefix) and how
// its messages are encoded, given once and shared by every component that reads or writes the
// queue.

import "github.com/redis/go-redis/v9"

// Layout is where a queue lives and how its messages are encoded: what every Publisher,
// Subscriber and Inspector of one queue must agree on. Give it once and make each config from
// it, so that nothing is kept in step by hand:
//
//	layout := redisdelay.Layout{Client: rdb}
//	pub, err := redisdelay.NewPublisher(layout.PublisherConfig(), logger)
//	sub, err := redisdelay.NewSubscriber(layout.SubscriberConfig("billing"), logger)
//	in, err := redisdelay.NewInspector(layout.InspectorConfig(), logger)
//
// The components made from these share it: the Scheduler (package schedule) takes the
// Publisher it publishes through, the dashboard takes an Inspector, and the test kit's queue
// returns its Layout. Partitions are not part of it: the topic registry records each topic's
// partitions when the topic is first used (see PublisherConfig.Partitions). The Watermill-style
// configs keep their Client, KeyPrefix and Marshaler fields, so NewPublisher(config, logger)
// and NewSubscriber(config, logger) work without a Layout.
type Layout struct {
	// Client is the Redis connection: a *redis.Client, a *redis.ClusterClient or any other
	// redis.UniversalClient (a Sentinel failover client included). Required.
	Client redis.UniversalClient
	// KeyPrefix is put before every Redis key and channel; DefaultKeyPrefix when empty.
	KeyPrefix string
	// Marshaler encodes and decodes the messages; DefaultMarshalerUnmarshaler when nil.
	Marshaler MarshalerUnmarshaler
}

// PublisherConfig returns a PublisherConfig with the layout's Client, KeyPrefix and Marshaler
// and every other field at its default; set the others on the result.
func (l Layout) PublisherConfig() PublisherConfig {
	c := PublisherConfig{Client: l.Client, KeyPrefix: l.KeyPrefix}
	if l.Marshaler != nil {
		c.Marshaler = l.Marshaler
	}
	return c
}

// SubscriberConfig returns a SubscriberConfig for consumer group group with the layout's
// Client, KeyPrefix and Marshaler and every other field at its default.
func (l Layout) SubscriberConfig(group string) SubscriberConfig {
	return SubscriberConfig{Client: l.Client, KeyPrefix: l.KeyPrefix, Marshaler: l.Marshaler, ConsumerGroup: group}
}

// InspectorConfig returns an InspectorConfig with the layout's Client, KeyPrefix and Marshaler
// (as its Unmarshaler) and every other field at its default.
func (l Layout) InspectorConfig() InspectorConfig {
	c := InspectorConfig{Client: l.Client, KeyPrefix: l.KeyPrefix}
	if l.Marshaler != nil {
		c.Unmarshaler = l.Marshaler
	}
	return c
}

// Layout returns the Publisher's layout, its defaults filled in; its Marshaler is nil when the
// Publisher's does not also unmarshal (is not a MarshalerUnmarshaler).
func (p *Publisher) Layout() Layout {
	m, _ := p.config.Marshaler.(MarshalerUnmarshaler)
	return Layout{Client: p.config.Client, KeyPrefix: p.config.KeyPrefix, Marshaler: m}
}

// Layout returns the Subscriber's layout, its defaults filled in.
func (s *Subscriber) Layout() Layout {
	return Layout{Client: s.config.Client, KeyPrefix: s.config.KeyPrefix, Marshaler: s.config.Marshaler}
}

// Layout returns the Inspector's layout, its defaults filled in; its Marshaler is nil when the
// Inspector's Unmarshaler does not also marshal (is not a MarshalerUnmarshaler).
func (i *Inspector) Layout() Layout {
	m, _ := i.config.Unmarshaler.(MarshalerUnmarshaler)
	return Layout{Client: i.config.Client, KeyPrefix: i.config.KeyPrefix, Marshaler: m}
}

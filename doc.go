// Package redisdelay is a Watermill Pub/Sub whose transport is a Redis delay queue.
//
// A Publisher stores each message once per topic and schedules it, in a sorted set scored by
// its due time (Unix microseconds, Redis server clock), for every consumer group registered on
// the topic. A Subscriber claims due messages of its group atomically in a Lua script, leases
// them for LeaseTimeout, and hands them out one at a time on an unbuffered channel. Ack removes
// the lease; Nack makes the message due again after a backoff; a lease that expires makes the
// message due again with its attempt count raised by one. Delivery is therefore at least once.
//
// Delays come from Watermill's components/delay metadata (_watermill_delayed_until and
// _watermill_delayed_for) and from delay.WithContext on the message context; see DelayOf for
// the exact rule. Subscribers do not poll on a fixed interval: they sleep until the earliest
// due time of their group and are woken through Redis Pub/Sub when an earlier message arrives.
//
// Every key of a topic carries the same hash tag, so a topic lives in one Redis Cluster slot and
// every script declares all the keys it touches. See the README for the key layout.
package redisdelay

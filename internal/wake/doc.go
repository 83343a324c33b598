// Package wake carries wake-ups from Redis to the subscriptions that sleep until their group's
// earliest due time. Scripts publish a group's new earliest due time (Unix µs, Redis clock) on
// the group's wake channel whenever it moves earlier (lua/lib/wake.lua); a Hub subscribes the
// channels its Watches name and hands each wake-up to their watchers. A (re)subscribe
// confirmation wakes a channel's watchers too, since wake-ups published while the channel was
// not subscribed are lost.
//
// Scripts and the Hub must agree on the kind of Pub/Sub. A script tries SPUBLISH and falls back
// to PUBLISH when Redis answers it with an error. The Hub decides once, on its first
// subscription: it sends SSUBSCRIBE and reads the reply; a confirmation means sharded Pub/Sub
// (Redis 7), an error reply (Redis 6.2 and miniredis do not know the command) means classic
// SUBSCRIBE, and no reply (Redis down) decides nothing, so the next attempt probes again.
//
// Classic Pub/Sub needs a single connection: Redis Cluster broadcasts PUBLISH to every node.
// Sharded Pub/Sub keeps a wake-up on the shard of its channel, which carries its topic's hash
// tag, so on a Redis Cluster the Hub keeps one connection per master, each to that master's
// own address, and each channel on the connection of its master. A channel whose slot moves
// (resharding, failover) is dropped by Redis with an "sunsubscribe", or refused with an error
// reply that cannot be told apart from the others on its connection (MOVED from a stale view of
// the cluster, CROSSSLOT when go-redis resubscribes channels of several slots with one command
// after a reconnect): either way the channel is subscribed again, one channel per command, on
// the connection of its master as the cluster is then seen.
//
// No Redis I/O happens under the Hub's mutex. A Watch or an Unwatch only changes what is
// wanted; the Hub's subscriber goroutine compares that with each channel's state and sends one
// command at a time, so a Watch and an Unwatch of the same channel cannot race on the wire. A
// channel is not subscribed again while its unsubscribe is unanswered (unless the reply is lost
// with its connection): replies come in the order of the commands, so a confirmation received
// while joining answers a subscribe sent since the last unsubscribe, and a watcher is ready
// only once Redis has confirmed its channel.
package wake

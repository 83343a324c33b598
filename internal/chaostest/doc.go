// Package chaostest is the fault-injection ("chaos") suite of redisdelay: it runs the adapter
// against real redis-server processes (started by internal/redistest on free loopback ports,
// never the Redis on 6379) and breaks things on purpose, counting for each scenario the
// messages lost, duplicated and delivered early.
//
// It is a module of its own, so that its test-only dependencies (toxiproxy, run in-process as a
// TCP fault proxy on 127.0.0.1) stay out of the library's go.mod. Every test file carries the
// build tag chaos:
//
//	cd internal/chaostest && go test -tags chaos -count=1 .         # full run, at most 10 minutes
//	cd internal/chaostest && go test -tags chaos -short -count=1 .  # CI run, at most 3 minutes
//
// Each scenario logs one line "SUMMARY scenario=… published=… acknowledged=… delivered=…
// lost=… duplicated=… early=… max_publish_latency=…" (go test -v shows it for passing tests).
//
// The guarantees checked under load (scenarios 1, 3, 4, 6): no message whose Publish returned
// nil is lost; a message whose Publish returned an error wrapping redisdelay.ErrOutcomeUnknown
// may or may not arrive, and one whose Publish returned any other error never arrives; no
// message is delivered before its due time (the time just before the Publish call plus its
// delay); and no Publish stores a message twice, that is each UUID is delivered at most once
// with redisdelay.AttemptMetadataKey "1" (redeliveries after a lost ack or an expired lease
// carry attempt 2 or more, and are counted as duplicates).
//
// Scenarios:
//
//  1. TestNoAcknowledgedMessageIsLostEarlyOrStoredTwiceUnderProxyFaults: 4 publishers (1-3
//     messages per call, half of them delayed 0-500 ms) and 2 subscribers reach Redis through
//     the proxy, with LeaseTimeout and OperationTimeout 1 s. Faults: freeze-stall (every byte
//     held for 2 s, twice the lease, then delivered), freeze-blackhole (every byte dropped for
//     2 s, then the connections closed), latency-50ms (in each direction), reset-every-second
//     (once a second, for 100 ms, every reply from Redis is dropped and its connection cut, so
//     go-redis sends commands that already ran again; then every remaining connection is
//     closed).
//  2. TestCallsReturnWithinOperationTimeoutWhileRedisIsFrozen: with Redis frozen (proxy
//     blackhole, proxy stall, SIGSTOP), 64 concurrent Publish calls each return an error within
//     OperationTimeout + 100 ms, and so does Subscriber.Close of a subscriber holding a message.
//     After the thaw, only the messages whose Publish said ErrOutcomeUnknown may arrive.
//  3. TestRedisKilledUnderLoadLosesNothingAcknowledged: Redis with AOF (appendfsync always) is
//     killed with SIGKILL several times under load and restarted on the same port.
//  4. TestFullRedisRefusesPublishAndKeepsDraining: maxmemory 8mb, noeviction. Publish until it
//     fails with an error wrapping redisdelay.ErrRedisFull; a fresh subscriber of the registered
//     group then nacks a few messages into the dead-letter topic (MaxAttempts 1) while Redis is
//     still full, drains and acks the rest, and Publish works again afterwards.
//  5. TestEvictingRedisIsRefusedUnlessAllowed: under allkeys-lru, volatile-lru and
//     allkeys-random, Publish, SubscribeInitialize and Subscribe fail with
//     redisdelay.ErrEvictingRedis and store nothing; with AllowEvictingRedis they work.
//  6. TestSoakConsumersKilledRepeatedlyLoseNothing: consumer processes (the test binary
//     re-executed) are killed with SIGKILL every 0.3-0.9 s while publishing goes on (20 s with
//     -short, 150 s otherwise); a fresh consumer then drains. Duplicates are reported.
//  7. TestBadInputIsRefusedWholeWithoutPanic: nil message, unparseable delay metadata, a delay
//     above redisdelay.MaxDelay, a reserved _redisdelay_ key, a message above MaxMessageBytes, a
//     topic with braces and an empty topic: Publish returns a *redisdelay.MessageError (or an
//     error wrapping redisdelay.ErrInvalidName) naming the topic and UUID, does not panic, and
//     stores nothing of the batch.
//  8. TestSchedulersPublishEachTickOnceUnderProxyFaults: three Schedulers act on one "@every 1s"
//     schedule, each through a fault proxy of its own (LeaseTimeout and OperationTimeout 1 s),
//     for 30 s (15 s with -short), while random faults start a few ms after a tick, when a
//     Scheduler is acting on it, on random proxies, at most two at once: blackhole, stall or
//     200 ms latency for 1-4 s, or a burst of connection resets. A consumer group of the
//     schedule's topic, on a direct connection and with no new-group window, must receive one
//     message per tick from the first to the end of the faults (none skipped, none stored
//     twice), none before its tick time (TickTimeMetadataKey), each keyed TickKey; the
//     schedule's schedule.Info must count no tick skipped and one published per message. The
//     summary line adds the faults injected and the lateness (receipt minus tick time) p50, p99
//     and max. CHAOSTEST_SEED=<n> replays the fault choices of the run that logged seed n.
//  9. TestSchedulerPublishHeldInTheNetworkStoresNothingMore: a go-redis hook holds one tick's
//     publish of a Scheduler for LeaseTimeout + TickKeyRetention + 3 s, as a stalled network
//     would, then sends it; it must store nothing more (the Scheduler's publishing calls are
//     fenced on the Redis clock).
//
// CHAOSTEST_VERBOSE=1 shows the adapter's info and debug logs; by default only its first 10
// errors per scenario are shown.
//
// Without redis-server on the PATH the tests are skipped, unless REDISDELAY_REQUIRE_REDIS=1.
package chaostest

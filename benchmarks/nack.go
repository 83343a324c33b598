package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
)

// Redis CPU of the nack path (cpu_nack), in the consume scenario. Redis reports script time per
// command name only (every script is "evalsha"), so the nack script's share is found by
// difference, in one round and with the same code, messages and subscriber:
//
//	A: N due messages, one subscriber, every message acked       (claim + ack)
//	B: N due messages, one subscriber, every message nacked on its first delivery and acked on
//	   the second                                                 (claim + nack + claim + ack)
//
// cpu_nack = (B - A) / N: the Redis CPU one nack adds to a message, that is the nack script call
// plus the message's second claim. redisdelay's subscriber gets NackBackoff ConstantBackoff(0),
// the smallest backoff, so a nacked message is due again at once. (A per-script split from
// SLOWLOG is not used: with slowlog-log-slower-than 0 Redis also logs every command a script
// runs, inside the script's own time, which inflates a script call by about a quarter.)

var nackCount = flag.Int("nack-count", 20_000, "messages of each cpu_nack run (-quick: 2000)")

const nackCap = 60 * time.Second // time cap of one cpu_nack run

// setClaimAckCPU sets cpu_claim_ack from meter, started before a consume_1 run that consumed
// got messages, and returns it (µs/msg), or -1 when it could not be measured.
func (b *bench) setClaimAckCPU(sys system, meter *cpuMeter, got int) float64 {
	cost, err := meter.done()
	if err != nil || got == 0 {
		b.res.note("cpu_claim_ack / %s: not measured: %v", sys.name(), err)
		return -1
	}
	v := cost.usec / float64(got)
	b.res.set("cpu_claim_ack", sys.name(), v, fmt.Sprintf("%s: %.0f calls, %.1f µs/call, %.2f msgs/call, Subscribe to Close", cpuWhat(sys.name()), cost.calls, cost.usec/max(cost.calls, 1), float64(got)/max(cost.calls, 1)))
	progress("  %s: claim+ack Redis CPU %.2f µs/msg", sys.name(), v)
	return v
}

// runNackCost measures cpu_nack for the Watermill systems; claimAck is this round's
// cpu_claim_ack (consume_1), for the notes.
func (b *bench) runNackCost(sys system, claimAck float64) error {
	ws, ok := sys.(*wmSystem)
	if !ok {
		b.res.note("cpu_nack / %s: n/a: not a Watermill Pub/Sub; its retries go through its own retry set and forwarder", sys.name())
		return nil
	}
	n := *nackCount
	if isQuickRun() {
		n = min(n, 2_000)
	}
	if err := b.reset(); err != nil {
		return err
	}
	baseTopic, nackTopic := b.topic("nack-base"), b.topic("nack")
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	for _, t := range []string{baseTopic, nackTopic} {
		if err := initialize(sys, b.addr, t); err != nil {
			prod.close()
			return err
		}
		if got, _, err := publishN(prod, t, n, 16, 100, 5*time.Minute, b.plainItem); err != nil || got < n {
			prod.close()
			return fmt.Errorf("nack run: pre-publish: %d of %d: %v", got, n, err)
		}
	}
	prod.close()

	var costs [2]cmdCost
	var nacks int
	for i, nackFirst := range []bool{false, true} {
		topic := baseTopic
		if nackFirst {
			topic = nackTopic
		}
		w := b.watch()
		meter := b.cpuMeter(sys.name())
		acked, nk, err := b.nackRun(ws, topic, n, nackFirst)
		if err != nil {
			return err
		}
		if costs[i], err = meter.done(); err != nil {
			return err
		}
		w(fmt.Sprintf("%s nack run (nack first: %v)", sys.name(), nackFirst))
		if acked < n {
			return fmt.Errorf("nack run (nack first: %v): only %d of %d acked within %s", nackFirst, acked, n, nackCap)
		}
		if nackFirst {
			nacks = nk
		}
	}
	perA, perB := costs[0].usec/float64(n), costs[1].usec/float64(n)
	extraCalls := (costs[1].calls - costs[0].calls) / float64(n)
	v := perB - perA
	runs := fmt.Sprintf("%d msgs nacked once then acked (%d nacks): %.2f µs/msg, %.2f calls/msg; the same acked only: %.2f µs/msg, %.2f calls/msg",
		n, nacks, perB, costs[1].calls/float64(n), perA, costs[0].calls/float64(n))
	if claimAck >= 0 {
		runs += fmt.Sprintf("; cpu_claim_ack this round %.2f", claimAck)
	}
	note := "nack script call + second claim, by difference (NackBackoff ConstantBackoff(0)): " + runs
	if math.Abs(extraCalls) < 0.01 {
		// The nack path sent no Redis command: its Redis CPU is nil; the usec difference is noise.
		v = 0
		note = fmt.Sprintf("Nack sends no Redis command (%.3f extra calls/msg: the message is re-sent in process and stays pending): ", extraCalls) + runs
	}
	b.res.set("cpu_nack", sys.name(), v, note)
	progress("  %s: nack path Redis CPU %.2f µs/msg (%.2f - %.2f), %.2f extra calls/msg", sys.name(), v, perB, perA, extraCalls)
	return nil
}

// nackRun consumes n messages of topic with one subscriber, Acking each, or with nackFirst
// Nacking each on its first delivery and Acking it on the next. It returns the acks and nacks
// seen; it stops after n acks or nackCap.
func (b *bench) nackRun(ws *wmSystem, topic string, n int, nackFirst bool) (acked, nacks int, err error) {
	client := newClient(b.addr, poolSize)
	defer client.Close()
	var sub message.Subscriber
	switch ws.kind {
	case sysRedisDelay:
		sub, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
			Client:         client,
			ConsumerGroup:  consumerGroup,
			ClaimBatchSize: ws.claimBatch,
			NackBackoff:    redisdelay.ConstantBackoff(0),
		}, watermill.NopLogger{})
	default:
		// Defaults: NackResendSleep NoSleep, the message is handed out again at once.
		sub, err = redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:        client,
			ConsumerGroup: consumerGroup,
		}, watermill.NopLogger{})
	}
	if err != nil {
		return 0, 0, err
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	seen := make(map[string]bool, n)
	timeout := time.NewTimer(nackCap)
	defer timeout.Stop()
	for acked < n {
		select {
		case msg, ok := <-ch:
			if !ok {
				return acked, nacks, fmt.Errorf("subscription closed after %d acks", acked)
			}
			if nackFirst && !seen[msg.UUID] {
				seen[msg.UUID] = true
				nacks++
				msg.Nack()
				continue
			}
			msg.Ack()
			acked++
		case <-timeout.C:
			return acked, nacks, nil
		}
	}
	return acked, nacks, nil
}

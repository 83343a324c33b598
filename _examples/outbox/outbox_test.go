package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// The tests run against a real PostgreSQL that they start from the local installation
// (startTempPostgres: initdb in a temporary directory, postgres on a free loopback port, as the
// user "postgres" when run as root, since initdb refuses root), and a redis-server on a free
// loopback port. Without PostgreSQL they skip, unless REDISDELAY_REQUIRE_POSTGRES=1 (as in CI).

// requirePostgresEnv turns a missing PostgreSQL into a failure.
const requirePostgresEnv = "REDISDELAY_REQUIRE_POSTGRES"

// outboxEnv is a PostgreSQL with the outbox schema, a Redis, and redisdelay's publisher,
// subscriber and Inspector on it.
type outboxEnv struct {
	db   *sql.DB
	pub  *redisdelay.Publisher
	sub  *redisdelay.Subscriber
	insp *redisdelay.Inspector
}

func newOutboxEnv(t *testing.T) *outboxEnv {
	t.Helper()
	pg, err := startTempPostgres()
	if errors.Is(err, errNoPostgres) {
		if os.Getenv(requirePostgresEnv) == "1" {
			t.Fatalf("%v, and %s=1", err, requirePostgresEnv)
		}
		t.Skipf("%v; install it (apt-get install postgresql) or set %s=1 to make this a failure", err, requirePostgresEnv)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	db, err := sql.Open("postgres", pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := initSchema(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t, redistest.Options{}).Addr})
	t.Cleanup(func() { _ = client.Close() })
	e := &outboxEnv{db: db}
	if e.pub, err = redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyRetention: time.Hour}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.pub.Close() })
	if e.sub, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: group}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sub.Close() })
	if err := e.sub.SubscribeInitialize(checkTopic); err != nil {
		t.Fatal(err)
	}
	if e.insp, err = redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// startForwarder runs a forwarder from the outbox to out until the test ends or stop is called.
func (e *outboxEnv) startForwarder(t *testing.T, out message.Publisher) (stop func()) {
	t.Helper()
	fwd, err := newForwarder(e.db, out, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fwd.Run(context.Background()) }()
	<-fwd.Running()
	stop = sync.OnceFunc(func() {
		_ = fwd.Close()
		if err := <-done; err != nil {
			t.Errorf("forwarder: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// deliveries records what the subscriber received: the times of each message's deliveries, by
// UUID, and the key and payload of each.
type deliveries struct {
	mu      sync.Mutex
	at      map[string][]time.Time
	key     map[string]string
	payload map[string]string
}

// consume acks every message of checkTopic until the test ends.
func (e *outboxEnv) consume(t *testing.T) *deliveries {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := e.sub.Subscribe(ctx, checkTopic)
	if err != nil {
		t.Fatal(err)
	}
	d := &deliveries{at: map[string][]time.Time{}, key: map[string]string{}, payload: map[string]string{}}
	go func() {
		for msg := range msgs {
			d.mu.Lock()
			d.at[msg.UUID] = append(d.at[msg.UUID], time.Now())
			d.key[msg.UUID] = msg.Metadata.Get(redisdelay.KeyMetadataKey)
			d.payload[msg.UUID] = string(msg.Payload)
			d.mu.Unlock()
			msg.Ack()
		}
	}()
	return d
}

func (d *deliveries) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}

// waitFor waits until n distinct messages arrived.
func (d *deliveries) waitFor(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for d.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived within %s", d.count(), n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOutboxDeliversCommittedMessagesAtTheirDueTimeAndRolledBackOnesNever places orders, each
// inserted with its keyed, delayed payment check in one transaction, every fourth transaction
// rolled back. It measures the forwarder's throughput (a backlog forwarded from scratch) and the
// lateness the hop adds, and checks that every committed check arrives once, never before its
// transaction began plus its delay, with its key, and that no rolled-back one exists.
func TestOutboxDeliversCommittedMessagesAtTheirDueTimeAndRolledBackOnesNever(t *testing.T) {
	e := newOutboxEnv(t)
	ctx := context.Background()
	const backlog, live = 1000, 200
	// The live orders' delay: long enough that each check is still scheduled when the loop below
	// reads its due time, after all 200 were placed, on a loaded machine too (with 2 s, a check
	// was delivered and acked before the loop reached it).
	const d = 6 * time.Second

	// A backlog, written while no forwarder runs, measures the forwarder's throughput.
	began := map[string]time.Time{} // by key
	var rolledBack []string
	place := func(id string, d time.Duration, commit bool) {
		at, err := placeOrder(ctx, e.db, id, d, commit)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			began["order-"+id] = at
		} else {
			rolledBack = append(rolledBack, "order-"+id)
		}
	}
	for i := range backlog {
		place(fmt.Sprintf("backlog-%04d", i), time.Hour, (i+1)%4 != 0)
	}
	committedBacklog := len(began)
	start := time.Now()
	stop := e.startForwarder(t, e.pub)
	waitScheduledCount(t, e.insp, committedBacklog, 60*time.Second)
	throughput := float64(committedBacklog) / time.Since(start).Seconds()
	stop()

	// Live orders, placed at a steady pace while the forwarder runs, measure the hop's lateness:
	// how far each check's due time in Redis lies past its transaction's start plus its delay.
	msgs := e.consume(t)
	e.startForwarder(t, e.pub)
	liveBegan := map[string]time.Time{}
	for i := range live {
		id := fmt.Sprintf("live-%04d", i)
		place(id, d, (i+1)%4 != 0)
		if at, ok := began["order-"+id]; ok {
			liveBegan["order-"+id] = at
		}
		time.Sleep(5 * time.Millisecond)
	}
	var hop []time.Duration
	for key, at := range liveBegan {
		st, err := waitScheduled(ctx, e.insp, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hop = append(hop, st.DueAt.Sub(at.Add(d)))
	}
	msgs.waitFor(t, len(liveBegan), d+15*time.Second)

	var early, dup int
	var lateness []time.Duration
	msgs.mu.Lock()
	for uuid, ats := range msgs.at {
		key := msgs.key[uuid]
		at, ok := liveBegan[key]
		if !ok {
			t.Errorf("message %s with key %q arrived, but no live committed order has that key", uuid, key)
			continue
		}
		if ats[0].Before(at.Add(d)) {
			early++
		}
		dup += len(ats) - 1
		lateness = append(lateness, ats[0].Sub(at.Add(d)))
	}
	msgs.mu.Unlock()
	for _, key := range rolledBack {
		st, err := e.insp.Status(ctx, checkTopic, redisdelay.ByKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := st.Groups[group]; st.Live || (ok && g.State != redisdelay.StateNotFound) {
			t.Errorf("the check of a rolled-back order exists: %s %+v", key, st)
		}
	}
	rows, err := outboxRows(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forwarder throughput: %d messages from a backlog in Redis at %.0f messages/s; hop (due time in Redis minus transaction start plus delay) over %d live messages: p50 %s p99 %s max %s; delivery after due p50 %s p99 %s max %s; %d early, %d duplicates; %d rolled back, %d outbox rows for %d committed",
		committedBacklog, throughput, len(hop), percentile(hop, 50), percentile(hop, 99), percentile(hop, 100), percentile(lateness, 50), percentile(lateness, 99), percentile(lateness, 100), early, dup, len(rolledBack), rows, len(began))
	if early > 0 || dup > 0 {
		t.Errorf("%d early, %d duplicate deliveries", early, dup)
	}
	if rows != len(began) {
		t.Errorf("the outbox holds %d rows for %d committed transactions", rows, len(began))
	}
	if m := percentile(hop, 0); m < 0 {
		t.Errorf("a due time lies %s before its transaction's start plus its delay", m)
	}
	if m := percentile(hop, 100); m > hopBound+time.Second {
		t.Errorf("the hop moved a due time by %s", m)
	}
}

// crashingPublisher is the forwarder's publisher, made to crash: the first forward of every
// crashEvery-th message is published to redisdelay and then reported as failed, as when the
// forwarder dies after the publish and before it marks the outbox row forwarded. The forwarder
// then sends the message again.
type crashingPublisher struct {
	message.Publisher
	crashEvery int

	mu      sync.Mutex
	seen    map[string]bool // messages forwarded at least once
	crashes int
}

func (p *crashingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	crash := false
	for _, m := range msgs {
		if !p.seen[m.UUID] {
			p.seen[m.UUID] = true
			crash = crash || len(p.seen)%p.crashEvery == 0
		}
	}
	if crash {
		p.crashes++
		return errors.New("crashed after publishing, before marking the outbox row forwarded")
	}
	return nil
}

// TestOutboxForwarderCrashesNeverDuplicateAKeyedMessageNorMakeOneEarly forwards keyed and
// unkeyed delayed messages through a forwarder that crashes after publishing every sixth
// message (before marking the row forwarded, so it sends the message again) and is also stopped and replaced
// halfway. Keyed messages arrive exactly once (the re-send is a Duplicate that redisdelay does
// not store); unkeyed ones may arrive twice, and the test counts how often. No message arrives
// before its transaction's start plus its delay. A second transaction for a key with
// OnDuplicate "replace" replaces the first message; one with the default policy leaves it.
func TestOutboxForwarderCrashesNeverDuplicateAKeyedMessageNorMakeOneEarly(t *testing.T) {
	e := newOutboxEnv(t)
	ctx := context.Background()
	const n = 300
	// Each crash holds the outbox up for watermill-sql's ResendInterval (100 ms here), so the
	// forwarder falls behind by seconds: 60 crashes, 6 s and more on a loaded machine. The
	// delay outlasts that: a message that reaches Redis after its due time is delivered at
	// once, and a replacement that comes after the message ran can replace nothing. (With 6 s,
	// CI once saw the last replacements come after their messages ran.)
	const d = 15 * time.Second
	msgs := e.consume(t)
	out := &crashingPublisher{Publisher: e.pub, crashEvery: 6, seen: map[string]bool{}}
	stop := e.startForwarder(t, out)

	type sent struct {
		key, payload string
		notBefore    time.Time
	}
	var mu sync.Mutex
	byUUID := map[string]sent{}
	publish := func(msg *message.Message, d time.Duration) {
		began := time.Now()
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := outboxPublisher(tx)
		if err != nil {
			t.Fatal(err)
		}
		delay.Message(msg, delay.For(d))
		if err := pub.Publish(checkTopic, msg); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		byUUID[msg.UUID] = sent{key: msg.Metadata.Get(redisdelay.KeyMetadataKey), payload: string(msg.Payload), notBefore: began.Add(d)}
		mu.Unlock()
	}
	var keyed, replaced, kept []string
	for i := range n {
		if i == n/2 {
			stop() // the forwarder stops with messages in flight; a new one takes over
			stop = e.startForwarder(t, out)
		}
		msg := message.NewMessage(watermill.NewUUID(), []byte("v1"))
		if i%2 == 0 {
			key := fmt.Sprintf("order-%04d", i)
			redisdelay.WithKey(msg, key)
			keyed = append(keyed, key)
			publish(msg, d)
			switch i % 10 {
			case 0: // the order changes: its check is replaced, due later
				again := message.NewMessage(watermill.NewUUID(), []byte("v2"))
				redisdelay.WithKey(again, key)
				again.Metadata.Set(redisdelay.OnDuplicateMetadataKey, string(redisdelay.ReplaceExisting))
				publish(again, d+500*time.Millisecond)
				replaced = append(replaced, key)
			case 4: // a second check for the same order, default policy: the first one stays
				again := message.NewMessage(watermill.NewUUID(), []byte("v2"))
				redisdelay.WithKey(again, key)
				publish(again, d)
				kept = append(kept, key)
			}
		} else {
			publish(msg, d)
		}
	}
	unkeyed := n - len(keyed)
	msgs.waitFor(t, len(keyed)+unkeyed, d+20*time.Second)
	time.Sleep(time.Second) // late re-sends would arrive by now

	msgs.mu.Lock()
	defer msgs.mu.Unlock()
	perKey := map[string][]string{} // key -> payloads delivered
	var early, unkeyedDups int
	for uuid, ats := range msgs.at {
		s, ok := byUUID[uuid]
		if !ok {
			t.Errorf("message %s arrived but was never sent", uuid)
			continue
		}
		for _, at := range ats {
			if at.Before(s.notBefore) {
				early++
			}
		}
		if s.key == "" {
			unkeyedDups += len(ats) - 1
			continue
		}
		for range ats {
			perKey[s.key] = append(perKey[s.key], msgs.payload[uuid])
		}
	}
	keyedDups := 0
	for _, key := range keyed {
		got := perKey[key]
		keyedDups += max(len(got)-1, 0)
		if len(got) != 1 {
			t.Errorf("key %s delivered %d times (%v), want once", key, len(got), got)
		}
	}
	for _, key := range replaced {
		if got := perKey[key]; len(got) != 1 || got[0] != "v2" {
			t.Errorf("key %s, replaced through the outbox: delivered %v, want [v2]", key, got)
		}
	}
	for _, key := range kept {
		if got := perKey[key]; len(got) != 1 || got[0] != "v1" {
			t.Errorf("key %s, sent again with the default policy: delivered %v, want [v1]", key, got)
		}
	}
	out.mu.Lock()
	crashes := out.crashes
	out.mu.Unlock()
	t.Logf("%d keyed (%d replaced, %d sent twice and kept) and %d unkeyed messages through a forwarder that crashed %d times after publishing and was replaced once: keyed delivered more than once %d, unkeyed duplicates %d, early %d",
		len(keyed), len(replaced), len(kept), unkeyed, crashes, keyedDups, unkeyedDups, early)
	if early > 0 {
		t.Errorf("%d deliveries before their due time", early)
	}
	if unkeyedDups == 0 {
		t.Error("no unkeyed message was delivered twice: the crashes did not make the forwarder send again")
	}
}

// waitScheduledCount waits until the group holds n scheduled checks.
func waitScheduledCount(t *testing.T, insp *redisdelay.Inspector, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		stats, err := insp.Stats(context.Background(), checkTopic)
		if err == nil && len(stats) == 1 && stats[0].Scheduled >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scheduled checks not reached within %s: %+v %v", n, timeout, stats, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

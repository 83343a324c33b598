// Command outbox schedules a delayed message in the same PostgreSQL transaction as the
// application's own rows: a transactional outbox in front of redisdelay.
//
// Each order is inserted, and its payment check (due 30 minutes later, keyed "order-<id>")
// written to the outbox, in one transaction, through watermill-sql's publisher wrapped in
// Watermill's forwarder publisher. Watermill's forwarder (components/forwarder) reads the
// committed outbox rows and publishes them to redisdelay, where the check waits for its due
// time. Every fourth transaction rolls back after both writes, as when a later step fails:
// neither its order nor its check exists afterwards.
//
// The example then asks redisdelay's Inspector where each check stands: every committed
// order's check is scheduled in the group "order-service", due 30 minutes after its
// transaction (never before; the hop adds at most the forwarding delay, or 1.1 s); no
// rolled-back order's check exists, and the outbox holds one row per committed order. With a
// short -delay (10 s or less) it also consumes the checks and reports how late they started.
// The exit code is 0 when all of that holds, 1 otherwise, and 2 when there is no PostgreSQL.
//
// Run it from the repository root (the example is a module of its own):
//
//	cd _examples/outbox && go run .
//	cd _examples/outbox && go run . -delay 2s
//	POSTGRES_URL=postgres://user:password@127.0.0.1:5432/db?sslmode=disable REDIS_ADDR=127.0.0.1:6379 go run . -keep
//
// Without POSTGRES_URL it starts a throw-away PostgreSQL from a local installation (initdb and
// postgres on the PATH or in /usr/lib/postgresql/<version>/bin, as Debian's postgresql package
// installs them; as root they run as the user "postgres") and removes it at the end; without
// either it says what to start and exits 2. Without REDIS_ADDR (or REDIS_URL) it uses an
// embedded miniredis; with it, the key prefix redisdelay-example-outbox:, deleted at the end
// unless run with -keep.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
)

// group is the consumer group of the payment checks.
const group = "order-service"

// hopBound is the most a hop through the outbox can move a due time past the intended one:
// the forwarder publishes later, and redisdelay then clamps the due time into [U, U+1.1 s],
// U being _watermill_delayed_until (whole seconds). See docs/outbox.md.
const hopBound = 1100 * time.Millisecond

func main() {
	orders := flag.Int("orders", 12, "number of orders to place")
	d := flag.Duration("delay", 30*time.Minute, "how long after its order a payment check is due")
	keep := flag.Bool("keep", false, exampleredis.KeepUsage)
	flag.Parse()
	os.Exit(run(*orders, *d, *keep))
}

func run(orders int, d time.Duration, keep bool) int {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("%7.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pgURL, stopPostgres, err := openPostgres(logf)
	if errors.Is(err, errNoPostgres) {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		return 1
	}
	defer stopPostgres()
	db, err := sql.Open("postgres", pgURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		return 1
	}
	defer db.Close()

	rd, err := exampleredis.Open(ctx, "outbox", keep, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		return 1
	}
	defer func() {
		// exampleredis names the examples of the root module; this one runs from its folder.
		var hint strings.Builder
		if err := rd.Close(&hint); err != nil {
			fmt.Fprintln(os.Stderr, "outbox:", err)
		}
		fmt.Print(strings.ReplaceAll(hint.String(), "go run ./_examples/outbox", "go run ."))
	}()
	ok, err := demo(ctx, db, rd, orders, d, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

// demo places the orders, forwards their checks and checks the outcome; ok is false when a
// guarantee did not hold.
func demo(ctx context.Context, db *sql.DB, rd *exampleredis.Redis, orders int, d time.Duration, logf func(string, ...any)) (ok bool, err error) {
	if err := initSchema(ctx, db); err != nil {
		return false, err
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: rd.Client, KeyPrefix: rd.Prefix,
		// The forwarder sends a message again after a crash; the key's history outlasts that.
		KeyRetention: time.Hour,
	}, nil)
	if err != nil {
		return false, err
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: rd.Client, KeyPrefix: rd.Prefix, ConsumerGroup: group}, nil)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(checkTopic); err != nil {
		return false, err
	}
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: rd.Client, KeyPrefix: rd.Prefix}, nil)
	if err != nil {
		return false, err
	}

	fwd, err := newForwarder(db, pub, watermill.NopLogger{})
	if err != nil {
		return false, err
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(ctx) }()
	defer func() { _ = fwd.Close(); <-fwdDone }()
	<-fwd.Running()
	logf("forwarder running: outbox table %s -> redisdelay topic %s", outboxTopic, checkTopic)

	rowsBefore, err := outboxRows(ctx, db)
	if err != nil {
		return false, err
	}
	run := watermill.NewShortUUID()[:6]
	committed := map[string]time.Time{} // order id -> when its transaction began
	var rolledBack []string
	for i := range orders {
		id := fmt.Sprintf("%s-%02d", run, i+1)
		commit := (i+1)%4 != 0
		began, err := placeOrder(ctx, db, id, d, commit)
		if err != nil {
			return false, err
		}
		if commit {
			committed[id] = began
			logf("order %s placed, payment check due in %s (one transaction, committed)", id, d)
		} else {
			rolledBack = append(rolledBack, id)
			logf("order %s inserted and its check written, then the transaction rolled back", id)
		}
	}
	rowsAfter, err := outboxRows(ctx, db)
	if err != nil {
		return false, err
	}

	// Every committed check reaches redisdelay, due d after its transaction began.
	ok = true
	var hops []time.Duration
	for _, id := range sortedKeys(committed) {
		st, err := waitScheduled(ctx, insp, "order-"+id, 10*time.Second)
		if err != nil {
			return false, err
		}
		want := committed[id].Add(d)
		late := st.DueAt.Sub(want)
		hops = append(hops, late)
		verdict := "ok"
		if late < 0 || late > hopBound+time.Second {
			verdict, ok = "WRONG", false
		}
		logf("check of order %s: scheduled in %q, due %s (%+.3fs from its order + %s) %s", id, group, st.DueAt.Format(time.RFC3339Nano), late.Seconds(), d, verdict)
	}
	for _, id := range rolledBack {
		st, err := insp.Status(ctx, checkTopic, redisdelay.ByKey("order-"+id))
		if err != nil {
			return false, err
		}
		if g, ok := st.Groups[group]; st.Live || (ok && g.State != redisdelay.StateNotFound) {
			logf("check of rolled-back order %s exists: WRONG", id)
			ok = false
		}
	}
	logf("outbox rows written: %d for %d committed orders (%d rolled back wrote none)", rowsAfter-rowsBefore, len(committed), len(rolledBack))
	if rowsAfter-rowsBefore != len(committed) {
		ok = false
	}

	if d <= 10*time.Second {
		early, lateness, err := consume(ctx, sub, committed, d, logf)
		if err != nil {
			return false, err
		}
		logf("delivered %d of %d checks, %d early, lateness after due p50 %s max %s", len(lateness), len(committed), early, percentile(lateness, 50), percentile(lateness, 100))
		if early > 0 || len(lateness) != len(committed) {
			ok = false
		}
	} else {
		logf("the checks are due in %s; see them with the redisdelay CLI (command below), or run with -delay 2s to watch them arrive", d)
	}
	logf("summary: %d committed orders' checks scheduled (due-time offset from order + delay: min %s, max %s), %d rolled-back orders left no check: %s",
		len(committed), percentile(hops, 0), percentile(hops, 100), len(rolledBack), map[bool]string{true: "OK", false: "FAILED"}[ok])
	return ok, nil
}

// waitScheduled waits until the check with key is scheduled in the group, and returns its
// status there.
func waitScheduled(ctx context.Context, insp *redisdelay.Inspector, key string, timeout time.Duration) (redisdelay.KeyGroupStatus, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := insp.Status(ctx, checkTopic, redisdelay.ByKey(key))
		if err != nil {
			return redisdelay.KeyGroupStatus{}, err
		}
		if g, ok := st.Groups[group]; ok && g.State == redisdelay.StateScheduled {
			return g, nil
		}
		if time.Now().After(deadline) {
			return redisdelay.KeyGroupStatus{}, fmt.Errorf("the check %s did not reach redisdelay within %s: %+v", key, timeout, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consume receives the checks of the committed orders and returns how many started before
// their order's time plus d, and how late each started after it.
func consume(ctx context.Context, sub *redisdelay.Subscriber, committed map[string]time.Time, d time.Duration, logf func(string, ...any)) (early int, lateness []time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, checkTopic)
	if err != nil {
		return 0, nil, err
	}
	seen := map[string]bool{}
	for msg := range msgs {
		key := msg.Metadata.Get(redisdelay.KeyMetadataKey)
		id := key[len("order-"):]
		began, mine := committed[id]
		msg.Ack()
		if !mine || seen[id] {
			continue
		}
		seen[id] = true
		late := time.Since(began.Add(d))
		if late < 0 {
			early++
		}
		lateness = append(lateness, late)
		logf("payment check of order %s ran, %s after its due time", id, late.Round(time.Millisecond))
		if len(seen) == len(committed) {
			break
		}
	}
	return early, lateness, nil
}

func sortedKeys(m map[string]time.Time) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// percentile returns the p-th percentile of ds (0 the minimum, 100 the maximum), 0 for none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100].Round(time.Millisecond)
}

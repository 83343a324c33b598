// Command parcel-batching binds parcels to delivery trucks with the adapter's keyed batching: a
// truck leaves for an area as soon as it holds 10 parcels, or once the area's first parcel on it
// has waited 4 minutes (4s here, scaled down 60 times), with whatever it holds by then.
//
// Parcels arrive one by one at the depot, each a message on the topic depot.parcels with a JSON
// payload {"parcel_id", "area"} and its delivery area as batch key, set with
// redisdelay.WithBatchKey(msg, area). The publisher's PublisherConfig.Batching configures the
// topic with redisdelay.BatchConfig{MaxItems: 10, MaxWait: 4 * time.Second}: each parcel joins
// its area's open batch, and the batch is released as one message, in the same script call, by
// the parcel that brings it to 10 (trigger "size"), or 4s after its first parcel on the Redis
// clock, never earlier (trigger "time"). A Watermill router consumes the topic through a
// redisdelay.Subscriber of the consumer group "truck-dispatch"; its handler unpacks each batch
// with redisdelay.UnpackBatch and loads the parcels onto the area's next truck.
//
// Three areas get parcels at different rates: north, the busy one, 30 parcels 70ms apart, which
// fill three trucks by size; south, the slow one, 7 parcels 400ms apart, released by time with
// fewer than 10; west, 14 parcels 200ms apart, which fill one truck by size and leave 4 parcels
// loading. Once the trucks released by size and by time have left, the shift ends: the depot
// calls redisdelay.Inspector.RunNow with ByBatchKey for every area, which releases west's open batch at once
// (trigger "flush") and finds nothing open in the other two, so that no parcel is left behind.
//
// The output is a timeline, one line per parcel and per truck with the time since the start,
// such as "truck 3 for area north: 10 parcels (size)" or "truck 1 for area south: 7 parcels
// (time, first parcel waited 4.003s)", followed by a summary: parcels published, parcels bound
// to trucks, trucks by trigger, each area's trucks, parcels bound twice (must be 0), and how
// long the first parcel of each truck released by time waited: on this machine's clock, from
// just before its Publish call to the truck's delivery, and on the Redis clock, from just before
// its Publish call to the due time of the batch (redisdelay.DueTimeMetadataKey), which must have
// come when the truck was delivered. The exit code is 0 when every parcel published was bound
// to exactly one truck, byte for byte as published, each area's trucks hold the parcels the
// plan expects in publish order and left on the trigger it expects, and no truck released by
// time left before its first parcel had waited 4s on either clock; 1 otherwise. The run waits
// for these events and gives up after 12s.
//
// Run it from the repository root:
//
//	go run ./_examples/parcel-batching
//	REDIS_ADDR=127.0.0.1:6379 go run ./_examples/parcel-batching -keep
//
// Without REDIS_ADDR (or REDIS_URL) the example starts an embedded miniredis. With it, it uses
// that server under the key prefix redisdelay-example-parcel-batching:, deleting what an earlier run
// left there, so runs must not overlap. It deletes its keys when it ends, unless run with
// -keep. After the shift, once the router stopped, a late parcel for area east opens a batch
// that no truck takes; the example prints the redisdelay commands that show it (stats, list)
// either way.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
)

const (
	topic         = "depot.parcels"
	consumerGroup = "truck-dispatch"
	// timeout bounds the whole run.
	timeout = 12 * time.Second
)

// truckLoading is the batching of the topic: a truck takes 10 parcels, and leaves 4 minutes
// (here 4s) after its first parcel arrived when it is not full by then.
var truckLoading = redisdelay.BatchConfig{MaxItems: 10, MaxWait: 4 * time.Second}

// area is a delivery area and how its parcels arrive: count of them, the first at offset first
// from the start, then one every every.
type area struct {
	name         string
	count        int
	first, every time.Duration
	// flushedAtEnd tells that the area's last truck is still loading when the shift ends
	// (its first parcel arrives after the trucks released by time of the other areas are
	// due), so that the end-of-shift flush releases it. Otherwise it leaves by time.
	flushedAtEnd bool
}

// arrivesAt is the offset from the start at which the seq-th parcel (from 1) of a arrives.
func (a area) arrivesAt(seq int) time.Duration {
	return a.first + time.Duration(seq-1)*a.every
}

var areas = []area{
	{name: "north", count: 30, first: 0, every: 70 * time.Millisecond},
	{name: "south", count: 7, first: 100 * time.Millisecond, every: 400 * time.Millisecond},
	{name: "west", count: 14, first: 200 * time.Millisecond, every: 200 * time.Millisecond, flushedAtEnd: true},
}

// parcel is the payload of a parcel's message, and how the dispatcher knows the parcel.
type parcel struct {
	ID   string `json:"parcel_id"`
	Area string `json:"area"`
}

// parcelID is the ID of the seq-th parcel (from 1) of area.
func parcelID(area string, seq int) string {
	return fmt.Sprintf("%s-%02d", area, seq)
}

// truckPlan is a truck the plan expects: the parcels first..first+count-1 of its area (from 1),
// and the trigger that releases it.
type truckPlan struct {
	first, count int
	trigger      string
}

// plannedTrucks returns the trucks that a's parcels fill, in order, when each arrives at its
// planned offset: a truck is released by size when the parcel that fills it arrives, by time
// when the next parcel comes MaxWait or more after its first one (or when the last truck is not
// flushed), and by flush when it is the last truck of an area flushed at the end of the shift.
func plannedTrucks(a area, cfg redisdelay.BatchConfig) []truckPlan {
	var trucks []truckPlan
	var open *truckPlan
	var openedAt time.Duration
	for seq := 1; seq <= a.count; seq++ {
		at := a.arrivesAt(seq)
		if open != nil && at >= openedAt+cfg.MaxWait {
			open.trigger = redisdelay.BatchTriggerTime
			trucks = append(trucks, *open)
			open = nil
		}
		if open == nil {
			open, openedAt = &truckPlan{first: seq}, at
		}
		open.count++
		if open.count == cfg.MaxItems {
			open.trigger = redisdelay.BatchTriggerSize
			trucks = append(trucks, *open)
			open = nil
		}
	}
	if open != nil {
		open.trigger = redisdelay.BatchTriggerTime
		if a.flushedAtEnd {
			open.trigger = redisdelay.BatchTriggerFlush
		}
		trucks = append(trucks, *open)
	}
	return trucks
}

// describeTruck names a truck's parcels and its trigger, such as "north-01..north-10 (size)".
func describeTruck(area string, seqs []int, trigger string) string {
	return parcelNames(area, seqs) + " (" + trigger + ")"
}

// parcelNames names the parcels seqs of area, in the order loaded, such as
// "north-01..north-10"; a run of consecutive parcels is written as a range.
func parcelNames(area string, seqs []int) string {
	consecutive := len(seqs) > 1
	for i := 1; i < len(seqs); i++ {
		consecutive = consecutive && seqs[i] == seqs[i-1]+1
	}
	if consecutive {
		return parcelID(area, seqs[0]) + ".." + parcelID(area, seqs[len(seqs)-1])
	}
	ids := make([]string, len(seqs))
	for i, seq := range seqs {
		ids[i] = parcelID(area, seq)
	}
	return strings.Join(ids, ",")
}

func main() {
	os.Exit(run())
}

// run is the whole example; it returns the exit code, so that deferred cleanups run first.
func run() int {
	keep := flag.Bool("keep", false, exampleredis.KeepUsage)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "parcel-batching: unexpected arguments %q\n", flag.Args())
		return 2
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()
	if err := runExample(ctx, *keep, newTimeline(os.Stdout)); err != nil {
		// err may join several problems, one a line; each gets its own FAIL line.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "FAIL:", line)
		}
		return 1
	}
	return 0
}

// runExample connects to Redis, wires the publisher, subscriber, inspector and router, runs the
// shift, shuts everything down and prints the summary. It returns an error when the run failed,
// the summary's verdict included.
func runExample(ctx context.Context, keep bool, tl *timeline) (err error) {
	rd, err := exampleredis.Open(ctx, "parcel-batching", keep, tl.printf)
	if err != nil {
		return err
	}
	// Deletes the example's keys (unless -keep) and prints how to see its queues, last.
	defer func() { err = errors.Join(err, rd.Close(os.Stdout)) }()
	client := rd.Client

	prefix := rd.Prefix
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client:    client,
		KeyPrefix: prefix,
		Batching:  map[string]redisdelay.BatchConfig{topic: truckLoading},
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:        client,
		KeyPrefix:     prefix,
		ConsumerGroup: consumerGroup,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	// The inspector flushes the open batches at the end of the shift; it must use the
	// publisher's key prefix (and partitions, 1 here). It holds no resources.
	inspector, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix}, watermill.NopLogger{})
	if err != nil {
		return err
	}

	// Register the group before the first parcel, as the dispatcher would at start-up.
	if err := sub.SubscribeInitialize(topic); err != nil {
		return err
	}

	d := newDispatch(tl, client)
	stopRouter, err := startRouter(ctx, sub, d.loadTruck)
	if err != nil {
		return err
	}
	tl.printf("router running: group %q consumes %q, batched by area: a truck leaves at %d parcels or %s after its first",
		consumerGroup, topic, truckLoading.MaxItems, truckLoading.MaxWait)

	shiftErr := d.runShift(ctx, pub, inspector)

	// The router closes the subscriber as well; Close is idempotent, so closing it here too is
	// harmless and makes the shutdown explicit.
	closeErr := errors.Join(stopRouter(), leaveLateParcel(pub, rd), pub.Close(), sub.Close())
	if closeErr != nil {
		tl.printf("shutdown: %v", closeErr)
	} else {
		tl.printf("router, publisher and subscriber closed")
	}
	return errors.Join(shiftErr, d.summarize(os.Stdout), closeErr)
}

// startRouter runs a router with one handler for the released batches and returns once it is
// running. The returned function closes the router and waits for Run to return.
func startRouter(ctx context.Context, sub message.Subscriber, handle message.NoPublishHandlerFunc) (func() error, error) {
	// The router's info logs would drown the timeline; the example prints its own lines.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddConsumerHandler("load-trucks", topic, sub, handle)

	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		return nil, fmt.Errorf("router stopped before it was running: %v", err)
	}
	return func() error {
		err := router.Close()
		return errors.Join(err, <-done)
	}, nil
}

// arrival is a parcel of the plan: the seq-th of its area, arriving at offset at from the start.
type arrival struct {
	at   time.Duration
	area string
	seq  int
}

// arrivals returns every parcel of the plan, in the order they arrive.
func arrivals() []arrival {
	var all []arrival
	for _, a := range areas {
		for seq := 1; seq <= a.count; seq++ {
			all = append(all, arrival{at: a.arrivesAt(seq), area: a.name, seq: seq})
		}
	}
	slices.SortStableFunc(all, func(x, y arrival) int { return cmp.Compare(x.at, y.at) })
	return all
}

// runShift publishes the parcels as they arrive, waits for the trucks released by size and by
// time, ends the shift by flushing every area's open batch, and waits until every parcel was
// bound to a truck, the deadline passed or ctx was cancelled (Ctrl-C).
func (d *dispatch) runShift(ctx context.Context, pub *redisdelay.Publisher, in *redisdelay.Inspector) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	start := time.Now()
	for _, a := range arrivals() {
		if err := sleepUntil(ctx, start.Add(a.at)); err != nil {
			return waitError(err, "the parcels to arrive")
		}
		if err := d.publishParcel(ctx, pub, a.area, a.seq); err != nil {
			return err
		}
	}
	d.tl.printf("all %d parcels arrived", d.total)

	if err := waitClosed(ctx, d.released, "the trucks released by size and by time"); err != nil {
		return err
	}
	d.tl.printf("end of shift: flushing every area's open batch")
	for _, a := range areas {
		res, err := in.RunNow(ctx, topic, redisdelay.ByBatchKey(a.name))
		if err != nil {
			return fmt.Errorf("end of shift: %w", err)
		}
		n := res.BatchItems
		d.flushed(a.name, n)
		if n == 0 {
			d.tl.printf("area %s: no open batch", a.name)
		} else {
			d.tl.printf("area %s: flushed its open batch of %d parcels", a.name, n)
		}
	}

	if err := waitClosed(ctx, d.allBound, "every parcel bound to a truck"); err != nil {
		return err
	}
	d.tl.printf("all %d parcels bound to trucks", d.total)
	return nil
}

// lateParcel arrives after the shift, when the router has stopped: it opens a batch of its
// area that no truck takes, for -keep to show.
var lateParcel = parcel{ID: parcelID("east", 1), Area: "east"}

// leaveLateParcel publishes lateParcel and adds to rd the commands that show its batch: open
// for MaxWait, then released and due, waiting for the next shift's dispatcher.
func leaveLateParcel(pub *redisdelay.Publisher, rd *exampleredis.Redis) error {
	payload, err := json.Marshal(lateParcel)
	if err != nil {
		return err
	}
	msg := redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), payload), lateParcel.Area)
	if err := pub.Publish(topic, msg); err != nil {
		return fmt.Errorf("publish the late parcel %s: %w", lateParcel.ID, err)
	}
	flags := []string{"--topic", topic, "--group", consumerGroup}
	rd.Look(fmt.Sprintf("the batch of the late parcel %s, due %s after it arrived", lateParcel.ID, truckLoading.MaxWait), slices.Concat([]string{"list"}, flags, []string{"--state", "scheduled"})...)
	rd.Look("the same batch once it is due, waiting for the next shift's dispatcher", slices.Concat([]string{"list"}, flags, []string{"--state", "due"})...)
	return nil
}

// publishParcel publishes the seq-th parcel of area with the area as its batch key. The parcel
// is recorded first, with the local and the Redis clock read just before Publish: its batch may
// be released, and its truck loaded, before Publish returns.
func (d *dispatch) publishParcel(ctx context.Context, pub *redisdelay.Publisher, area string, seq int) error {
	id := parcelID(area, seq)
	payload, err := json.Marshal(parcel{ID: id, Area: area})
	if err != nil {
		return err
	}
	msg := redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), payload), area)
	// Both readings come before the publish script reads the Redis clock, so a batch that
	// this parcel opens is due no earlier than either plus MaxWait.
	redisAt, err := d.client.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("parcel %s: read the Redis clock: %w", id, err)
	}
	d.record(&sentParcel{id: id, area: area, seq: seq, uuid: msg.UUID, payload: payload, at: time.Now(), redisAt: redisAt})
	// Printed before Publish, so that the line of the truck it fills comes after it.
	d.tl.printf("parcel %s arrives for area %s", id, area)
	if err := pub.Publish(topic, msg); err != nil {
		return fmt.Errorf("publish parcel %s: %w", id, err)
	}
	return nil
}

// loadTruck is the router handler: it unpacks a released batch and loads its parcels onto the
// area's next truck. Returning nil acks the batch; an error would nack it and the queue would
// deliver it again, which cannot repair a malformed batch, so those are acked and reported.
func (d *dispatch) loadTruck(msg *message.Message) error {
	t := truck{
		received: time.Now(),
		area:     msg.Metadata.Get(redisdelay.BatchKeyMetadataKey),
		trigger:  msg.Metadata.Get(redisdelay.BatchTriggerMetadataKey),
		attempt:  msg.Metadata.Get(redisdelay.AttemptMetadataKey),
	}
	var err error
	// Read after the claim, so on the Redis clock no earlier than the claim.
	if t.redisAt, err = d.client.Time(msg.Context()).Result(); err != nil {
		d.problem("batch %s of area %s: read the Redis clock: %v", msg.UUID, t.area, err)
	}
	if t.due, err = time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey)); err != nil {
		d.problem("batch %s of area %s: bad %s: %v", msg.UUID, t.area, redisdelay.DueTimeMetadataKey, err)
	}
	items, err := redisdelay.UnpackBatch(msg, nil)
	if err != nil {
		d.problem("dropping batch %s: %v", msg.UUID, err)
		return nil
	}
	if got := msg.Metadata.Get(redisdelay.BatchItemsMetadataKey); got != strconv.Itoa(len(items)) {
		d.problem("batch %s of area %s: %s is %q, but it holds %d items", msg.UUID, t.area, redisdelay.BatchItemsMetadataKey, got, len(items))
	}
	for i, item := range items {
		var p parcel
		if err := json.Unmarshal(item.Payload, &p); err != nil {
			d.problem("batch %s of area %s: item %d: bad payload: %v", msg.UUID, t.area, i+1, err)
			continue
		}
		t.parcels = append(t.parcels, loadedParcel{parcel: p, uuid: item.UUID, payload: item.Payload})
	}
	d.tl.printf("%s", d.load(t))
	return nil
}

// sentParcel is a parcel as published.
type sentParcel struct {
	id, area string
	seq      int
	uuid     string
	payload  []byte
	at       time.Time // this machine's clock, just before Publish
	redisAt  time.Time // the Redis clock, just before Publish
}

// loadedParcel is a parcel as a batch delivered it.
type loadedParcel struct {
	parcel
	uuid    string
	payload []byte
}

// truck is a delivered batch.
type truck struct {
	area, trigger, attempt string
	number                 int       // from 1 within the area, in the order delivered
	received               time.Time // this machine's clock
	redisAt                time.Time // the Redis clock, after the batch was claimed
	due                    time.Time // the batch's due time, on the Redis clock
	parcels                []loadedParcel
	seqs                   []int // of the parcels, in the order loaded
}

// dispatch is the truck dispatcher's state, safe for concurrent use: the parcels published, the
// trucks loaded, and what the summary reports.
type dispatch struct {
	tl     *timeline
	client *redis.Client
	total  int // parcels in the plan
	// released is closed once the trucks the plan expects to be released by size or by time
	// were delivered; allBound once every parcel of the plan was bound to a truck.
	released, allBound chan struct{}
	wantReleased       int

	mu        sync.Mutex
	sent      map[string]*sentParcel // by parcel ID
	bound     map[string]int         // parcel ID -> how many trucks it was loaded onto
	trucks    map[string][]truck     // by area, in the order delivered
	nReleased int                    // trucks delivered that were released by size or time
	flushes   map[string]int         // area -> parcels its end-of-shift flush released
	waited    []time.Duration        // of the first parcel of each truck released by time, local clock
	dueAfter  []time.Duration        // of the same, from its Publish to the batch's due time, Redis clock
	problems  []string
}

func newDispatch(tl *timeline, client *redis.Client) *dispatch {
	d := &dispatch{
		tl:       tl,
		client:   client,
		released: make(chan struct{}),
		allBound: make(chan struct{}),
		sent:     map[string]*sentParcel{},
		bound:    map[string]int{},
		trucks:   map[string][]truck{},
		flushes:  map[string]int{},
	}
	for _, a := range areas {
		d.total += a.count
		for _, t := range plannedTrucks(a, truckLoading) {
			if t.trigger != redisdelay.BatchTriggerFlush {
				d.wantReleased++
			}
		}
	}
	if d.wantReleased == 0 {
		close(d.released)
	}
	return d
}

func (d *dispatch) record(p *sentParcel) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent[p.id] = p
}

func (d *dispatch) flushed(area string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushes[area] = n
}

func (d *dispatch) problem(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.problemLocked(format, args...)
}

func (d *dispatch) problemLocked(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	d.problems = append(d.problems, line)
	d.tl.printf("PROBLEM: %s", line)
}

// load records truck t, checks its parcels against the ones published and, for a truck released
// by time, that its first parcel waited MaxWait on both clocks; it returns the timeline line.
func (d *dispatch) load(t truck) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	t.number = len(d.trucks[t.area]) + 1
	for _, p := range t.parcels {
		sent, ok := d.sent[p.ID]
		switch {
		case !ok:
			d.problemLocked("truck %d for area %s: unknown parcel %q", t.number, t.area, p.ID)
			continue
		case p.Area != t.area:
			d.problemLocked("truck %d for area %s: parcel %s is for area %s", t.number, t.area, p.ID, p.Area)
		case p.uuid != sent.uuid || string(p.payload) != string(sent.payload):
			d.problemLocked("truck %d for area %s: parcel %s is not as published", t.number, t.area, p.ID)
		}
		t.seqs = append(t.seqs, sent.seq)
		d.bound[p.ID]++
	}
	d.trucks[t.area] = append(d.trucks[t.area], t)

	note := t.trigger
	if t.trigger == redisdelay.BatchTriggerTime && len(t.parcels) > 0 {
		if first, ok := d.sent[t.parcels[0].ID]; ok {
			waited := t.received.Sub(first.at)
			dueAfter := t.due.Sub(first.redisAt)
			d.waited = append(d.waited, waited)
			d.dueAfter = append(d.dueAfter, dueAfter)
			note += fmt.Sprintf(", first parcel waited %.3fs", waited.Seconds())
			if waited < truckLoading.MaxWait {
				d.problemLocked("truck %d for area %s left %s after its first parcel, before %s", t.number, t.area, waited, truckLoading.MaxWait)
			}
			if dueAfter < truckLoading.MaxWait {
				d.problemLocked("truck %d for area %s was due %s after its first parcel on the Redis clock, before %s", t.number, t.area, dueAfter, truckLoading.MaxWait)
			}
		}
		if !t.redisAt.IsZero() && t.redisAt.Before(t.due) {
			d.problemLocked("truck %d for area %s was delivered before its due time %s on the Redis clock", t.number, t.area, t.due.Format(time.RFC3339Nano))
		}
	}
	if t.attempt != "1" {
		// Delivery is at least once: a batch can come again after a crash or an expired lease.
		note += ", attempt " + t.attempt
	}
	if t.trigger != redisdelay.BatchTriggerFlush {
		d.nReleased++
		if d.nReleased == d.wantReleased {
			close(d.released)
		}
	}
	if len(d.bound) == d.total && !isClosed(d.allBound) {
		close(d.allBound)
	}
	return fmt.Sprintf("truck %d for area %s: %d parcels (%s): %s", t.number, t.area, len(t.parcels), note, parcelNames(t.area, t.seqs))
}

// summarize prints the summary to w and returns an error when the run failed: a parcel not
// bound, or bound twice, an area's trucks not as planned, a flush that released what the plan
// did not expect, or a truck released by time before its first parcel waited MaxWait.
func (d *dispatch) summarize(w io.Writer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	byTrigger := map[string]int{}
	nTrucks := 0
	for _, ts := range d.trucks {
		for _, t := range ts {
			byTrigger[t.trigger]++
			nTrucks++
		}
	}
	var twice []string
	for _, id := range slices.Sorted(maps.Keys(d.bound)) {
		if d.bound[id] > 1 {
			twice = append(twice, fmt.Sprintf("%s (%d trucks)", id, d.bound[id]))
		}
	}
	perArea := make([]string, len(areas))
	for i, a := range areas {
		perArea[i] = fmt.Sprintf("%s %d", a.name, a.count)
	}

	fmt.Fprintln(w, "\nsummary")
	fmt.Fprintf(w, "  parcels published             %d (%s)\n", len(d.sent), strings.Join(perArea, ", "))
	fmt.Fprintf(w, "  parcels bound to trucks       %d\n", len(d.bound))
	fmt.Fprintf(w, "  parcels bound twice           %d\n", len(twice))
	fmt.Fprintf(w, "  trucks                        %d: %d by size, %d by time, %d by flush\n", nTrucks,
		byTrigger[redisdelay.BatchTriggerSize], byTrigger[redisdelay.BatchTriggerTime], byTrigger[redisdelay.BatchTriggerFlush])
	var errs []error
	for _, a := range areas {
		var want []string
		wantFlushed := 0
		for _, p := range plannedTrucks(a, truckLoading) {
			seqs := make([]int, p.count)
			for i := range seqs {
				seqs[i] = p.first + i
			}
			want = append(want, describeTruck(a.name, seqs, p.trigger))
			if p.trigger == redisdelay.BatchTriggerFlush {
				wantFlushed = p.count
			}
		}
		// The order of delivery is not the plan's business; the order of the parcels is.
		ts := slices.Clone(d.trucks[a.name])
		slices.SortStableFunc(ts, func(x, y truck) int { return cmp.Compare(firstSeq(x), firstSeq(y)) })
		got := make([]string, len(ts))
		for i, t := range ts {
			got[i] = describeTruck(a.name, t.seqs, t.trigger)
		}
		fmt.Fprintf(w, "  area %-24s %s\n", a.name, strings.Join(got, ", "))
		if !slices.Equal(got, want) {
			errs = append(errs, fmt.Errorf("area %s: trucks %s, want %s", a.name, strings.Join(got, ", "), strings.Join(want, ", ")))
		}
		if n := d.flushes[a.name]; n != wantFlushed {
			errs = append(errs, fmt.Errorf("area %s: the end-of-shift flush released %d parcels, want %d", a.name, n, wantFlushed))
		}
	}
	// Both from just before the first parcel's Publish: to the truck's delivery on this
	// machine's clock, and to the batch's due time on the Redis clock.
	fmt.Fprintf(w, "  trucks released by time       %d: first parcel waited min %s (local clock), due min %s after it (Redis clock)\n",
		len(d.waited), seconds(minOrZero(d.waited)), seconds(minOrZero(d.dueAfter)))

	if missing := d.total - len(d.bound); missing > 0 {
		var ids []string
		for _, a := range areas {
			for seq := 1; seq <= a.count; seq++ {
				if id := parcelID(a.name, seq); d.bound[id] == 0 {
					ids = append(ids, id)
				}
			}
		}
		errs = append(errs, fmt.Errorf("%d of %d parcels were never bound to a truck: %s", missing, d.total, strings.Join(ids, ", ")))
	}
	if len(d.sent) != d.total {
		errs = append(errs, fmt.Errorf("%d of %d parcels were published", len(d.sent), d.total))
	}
	if len(twice) > 0 {
		errs = append(errs, fmt.Errorf("parcels bound to more than one truck: %s", strings.Join(twice, ", ")))
	}
	for _, p := range d.problems {
		errs = append(errs, errors.New(p))
	}
	if len(errs) == 0 {
		fmt.Fprintf(w, "OK: all %d parcels bound to one truck each, as published; every truck as planned; no truck released by time before its first parcel waited %s\n",
			d.total, truckLoading.MaxWait)
	}
	return errors.Join(errs...)
}

func firstSeq(t truck) int {
	if len(t.seqs) == 0 {
		return 0
	}
	return t.seqs[0]
}

func minOrZero(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Min(ds)
}

// seconds formats d in seconds with millisecond precision, such as "4.003s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// waitClosed waits until ch is closed or ctx ends; what names what it waits for.
func waitClosed(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return waitError(ctx.Err(), what)
	}
}

// waitError describes why a wait for what ended early: the run's timeout or an interrupt.
func waitError(err error, what string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gave up waiting for %s after %s", what, timeout)
	}
	return errors.New("interrupted")
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleepUntil waits until t, or returns ctx's error if ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// timeline prints events prefixed with the time since it was created. It is safe for
// concurrent use, and lines come out in the order of their timestamps.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func newTimeline(out io.Writer) *timeline {
	return &timeline{out: out, start: time.Now()}
}

func (t *timeline) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%-8s %s\n", fmt.Sprintf("+%.3fs", time.Since(t.start).Seconds()), fmt.Sprintf(format, args...))
}

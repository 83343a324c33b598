package redisdelay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
)

// opKind is one operation of the model-based test (see TestModelBasedSequences).
type opKind int

const (
	opPublish opKind = iota
	opPublishBatch
	opRegister
	opRemove
	opCancel
	opReschedule
	opRunNow
	opCancelRef
	opRescheduleRef
	opRunNowRef
	opNack
	opCrash
	opRequeue
	opPurge
	opPause
	opResume
	opFlushBatch
	opCancelBatch
	opKinds
)

var opNames = [opKinds]string{"publish", "publish-batch", "register", "remove-group", "cancel", "reschedule",
	"run-now", "cancel-ref", "reschedule-ref", "run-now-ref", "nack-next", "crash", "requeue", "purge-scheduled",
	"pause", "resume", "flush-batch", "cancel-batch"}

// opWeights is how often each operation is drawn; the batch operations only when batching is on.
var opWeights = [opKinds]int{30, 10, 5, 2, 6, 4, 4, 3, 2, 3, 5, 1, 2, 2, 2, 3, 3, 2}

func (k opKind) batchOnly() bool {
	return k == opPublishBatch || k == opFlushBatch || k == opCancelBatch
}

const (
	modelGroups    = 4 // g0..g3
	modelKeys      = 6 // k0..k5
	modelBatchKeys = 2 // b0, b1
	modelFar       = time.Hour
)

// op is one operation with all its random choices drawn, so that a list of ops replays the
// same decisions (timing aside) and can be shrunk.
type op struct {
	kind   opKind
	group  int           // the group acted on
	key    int           // message key (-1: none) or batch key
	delay  time.Duration // publish delay, or reschedule delay (modelFar: an hour ahead)
	policy string        // OnDuplicateMetadataKey, "" for the config's (KeepExisting)
	pick   int           // which listed message a ref operation picks
}

func (o op) String() string {
	g := fmt.Sprintf("g%d", o.group)
	switch o.kind {
	case opPublish:
		s := fmt.Sprintf("publish delay=%s", o.delay)
		if o.key >= 0 {
			s += fmt.Sprintf(" key=k%d", o.key)
			if o.policy != "" {
				s += " on_duplicate=" + o.policy
			}
		}
		return s
	case opPublishBatch, opFlushBatch, opCancelBatch:
		return fmt.Sprintf("%s b%d", opNames[o.kind], o.key)
	case opCancel, opRunNow:
		return fmt.Sprintf("%s k%d", opNames[o.kind], o.key)
	case opReschedule:
		return fmt.Sprintf("reschedule k%d delay=%s", o.key, o.delay)
	case opCancelRef, opRunNowRef:
		return fmt.Sprintf("%s %s pick=%d", opNames[o.kind], g, o.pick)
	case opRescheduleRef:
		return fmt.Sprintf("reschedule-ref %s pick=%d delay=%s", g, o.pick, o.delay)
	}
	return opNames[o.kind] + " " + g
}

// genOps draws n operations, the first a registration; skip names operations left out.
func genOps(rng *rand.Rand, n int, batching bool, skip map[string]bool) []op {
	weights := opWeights
	for k := range weights {
		if (!batching && opKind(k).batchOnly()) || skip[opNames[k]] {
			weights[k] = 0
		}
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	ops := []op{{kind: opRegister, group: rng.Intn(modelGroups), key: -1}}
	for len(ops) < n {
		x := rng.Intn(total)
		var kind opKind
		for k, w := range weights {
			if x < w {
				kind = opKind(k)
				break
			}
			x -= w
		}
		o := op{kind: kind, group: rng.Intn(modelGroups), key: -1, pick: rng.Intn(1000)}
		switch kind {
		case opPublish:
			switch r := rng.Intn(100); {
			case r < 50:
			case r < 85:
				o.delay = time.Duration(1+rng.Intn(30)) * time.Millisecond
			default:
				o.delay = modelFar
			}
			if rng.Intn(2) == 0 {
				o.key = rng.Intn(modelKeys)
				if rng.Intn(2) == 0 {
					o.policy = []string{"keep", "replace", "keep-earlier", "keep-later"}[rng.Intn(4)]
				}
			}
		case opPublishBatch, opFlushBatch, opCancelBatch:
			o.key = rng.Intn(modelBatchKeys)
		case opCancel, opRunNow:
			o.key = rng.Intn(modelKeys)
		case opReschedule, opRescheduleRef:
			o.key = rng.Intn(modelKeys)
			o.delay = time.Duration(rng.Intn(31)) * time.Millisecond
			if rng.Intn(5) < 2 {
				o.delay = modelFar
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// exec runs one operation against Redis and applies to the model what its result says.
func (r *modelRun) exec(o op) {
	ctx := context.Background()
	gname := groupName(o.group)
	g := r.groups[o.group]
	switch o.kind {
	case opPublish:
		msg := message.NewMessage(watermill.NewUUID(), []byte("m"))
		key := ""
		if o.key >= 0 {
			key = fmt.Sprintf("k%d", o.key)
			redisdelay.WithKey(msg, key)
			if o.policy != "" {
				msg.Metadata.Set(redisdelay.OnDuplicateMetadataKey, o.policy)
			}
		}
		if o.delay > 0 {
			delay.Message(msg, delay.For(o.delay))
		}
		start := time.Now()
		outcomes, err := r.pub.PublishWithResult(r.topic, msg)
		if err != nil || len(outcomes) != 1 {
			r.failf("error", "publish: %v (outcomes %v)", err, outcomes)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		switch outcomes[0] {
		case redisdelay.OutcomeScheduled:
			s := r.newSlot(msg.UUID, start.Add(o.delay), time.Now().Add(o.delay))
			if key != "" {
				s.key = key
				r.keys[key] = s
			}
		case redisdelay.OutcomeDuplicate:
			r.slots[msg.UUID] = &slot{uuids: []string{msg.UUID}, groups: map[string]*groupExp{}}
		case redisdelay.OutcomeReplaced:
			s := r.keys[key]
			if s == nil {
				r.failf("model", "publish %s: Replaced, but the model knows no message with key %s", msg.UUID, key)
				return
			}
			s.uuids = append(s.uuids, msg.UUID)
			s.replaced = true
			r.slots[msg.UUID] = s
			now := time.Now()
			for _, e := range s.groups {
				if e.exp != expNever {
					// Due by now, the group may have claimed it: then the replace left it there.
					e.mayBeInFlight = e.mayBeInFlight || !e.current().After(now.Add(modelClockSkew))
					e.reschedule(start.Add(o.delay), now.Add(o.delay), now)
				}
			}
		default:
			r.failf("error", "publish: outcome %v", outcomes[0])
		}

	case opPublishBatch:
		bk := fmt.Sprintf("b%d", o.key)
		msg := redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), []byte("item")), bk)
		start := time.Now()
		outcomes, err := r.pub.PublishWithResult(r.topic, msg)
		if err != nil {
			r.failf("error", "publish batch item: %v", err)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(outcomes) != 1 || outcomes[0] != redisdelay.OutcomeScheduled {
			r.failf("error", "publish batch item: outcomes %v, want Scheduled", outcomes)
			return
		}
		b := r.batches[bk]
		if b == nil {
			b = &batchRec{key: bk}
			r.batches[bk] = b
			b.groups = r.registeredOrParked()
		}
		// Until the batch is released its items are due an hour after it opened (MaxWait).
		s := &slot{uuids: []string{msg.UUID}, batch: b, groups: map[string]*groupExp{}}
		for _, gn := range b.groups {
			s.groups[gn] = &groupExp{exp: expMust, versions: []version{{due: start.Add(modelFar), latest: time.Now().Add(modelFar)}}}
		}
		r.slots[msg.UUID] = s
		b.items = append(b.items, s)
		if len(b.items) == modelBatchMaxItems {
			r.releaseBatch(b, start)
		}

	case opRegister:
		if g.registered {
			return
		}
		r.register(o.group)

	case opRemove:
		if !g.registered {
			return
		}
		if g.sub != nil {
			_ = g.sub.Close()
			g.sub = nil
		}
		if _, err := r.in.RemoveGroup(ctx, r.topic, gname); err != nil {
			r.failf("error", "remove group %s: %v", gname, err)
			return
		}
		end := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		g.registered, g.paused = false, false
		for _, s := range r.slots {
			if e := s.groups[gname]; e != nil && e.exp != expNever {
				e.exp, e.neverAfter, e.exemptGen, e.removed = expNever, end, g.gen, true
			}
		}
		for _, b := range r.batches {
			if b.has(gname) {
				r.closeBatch(b) // dropped for a group: the next item opens a new batch
			}
		}

	case opCancel:
		key := fmt.Sprintf("k%d", o.key)
		res, err := r.in.Cancel(ctx, r.topic, redisdelay.ByKey(key))
		if err != nil {
			r.failf("error", "cancel %s: %v", key, err)
			return
		}
		end := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.keys[key]
		for gn, out := range res.Groups {
			if out != redisdelay.OutcomeApplied && out != redisdelay.OutcomeInFlight {
				continue
			}
			e := s.exp(gn)
			if e == nil {
				r.failf("model", "cancel %s: %s in group %q, which the model says never held it", key, out, gn)
				continue
			}
			if out == redisdelay.OutcomeApplied {
				e.exp, e.neverAfter = expNever, end
			} else if e.exp == expMust {
				e.exp = expMay
			}
		}

	case opReschedule, opRunNow:
		key := fmt.Sprintf("k%d", o.key)
		var res redisdelay.ActionResult
		var err error
		if o.kind == opRunNow {
			res, err = r.in.RunNow(ctx, r.topic, redisdelay.ByKey(key))
		} else {
			res, err = r.in.RescheduleAfter(ctx, r.topic, redisdelay.ByKey(key), o.delay)
		}
		if err != nil {
			r.failf("error", "%s %s: %v", opNames[o.kind], key, err)
			return
		}
		end := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.keys[key]
		for gn, out := range res.Groups {
			if out != redisdelay.OutcomeApplied {
				continue
			}
			e := s.exp(gn)
			if e == nil {
				r.failf("model", "%s %s: done in group %q, which the model says never held it", opNames[o.kind], key, gn)
				continue
			}
			e.reschedule(res.DueAt, res.DueAt, end)
			e.mayBeInFlight = false // applied: the group held it due
		}

	case opCancelRef, opRescheduleRef, opRunNowRef:
		if !g.registered {
			return
		}
		page, err := r.in.List(ctx, r.topic, gname, redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 50})
		if err != nil {
			r.failf("error", "list %s: %v", gname, err)
			return
		}
		if len(page.Messages) == 0 {
			return
		}
		info := page.Messages[o.pick%len(page.Messages)]
		itemUUID := info.UUID
		if strings.HasPrefix(info.UUID, "batch-") { // a batch: find it by its first item
			full, err := r.in.Message(ctx, r.topic, redisdelay.ByRef(gname, info.Ref))
			if err != nil {
				if errors.Is(err, redisdelay.ErrNotFound) {
					return // claimed or released meanwhile
				}
				r.failf("error", "message %s: %v", info.Ref, err)
				return
			}
			items, err := redisdelay.UnpackBatch(&message.Message{UUID: full.UUID, Metadata: full.Metadata, Payload: full.Payload}, nil)
			if err != nil {
				r.failf("error", "unpack listed batch %s: %v", info.Ref, err)
				return
			}
			if len(items) == 0 {
				// An open batch shows no items until it closes (its items wait in fields of
				// their own): it is the model's open batch of its batch key.
				r.mu.Lock()
				b := r.batches[full.Metadata[redisdelay.BatchKeyMetadataKey]]
				if b != nil && len(b.items) > 0 {
					itemUUID = b.items[0].uuids[0]
				}
				r.mu.Unlock()
				if itemUUID == info.UUID {
					return // not the model's open batch: claimed or released meanwhile
				}
			} else {
				itemUUID = items[0].UUID
			}
		}
		var out redisdelay.Outcome
		var due time.Time
		switch o.kind {
		case opCancelRef:
			out, err = outcome(r.in.Cancel(ctx, r.topic, redisdelay.ByRef(gname, info.Ref)))
		case opRescheduleRef:
			out, due, err = refOutcome(r.in.Reschedule(ctx, r.topic, redisdelay.ByRef(gname, info.Ref), time.Now().Add(o.delay)))
		default:
			out, due, err = refOutcome(r.in.RunNow(ctx, r.topic, redisdelay.ByRef(gname, info.Ref)))
		}
		if err != nil {
			r.failf("error", "%s %s: %v", opNames[o.kind], info.Ref, err)
			return
		}
		end := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.slots[itemUUID]
		if s == nil {
			r.failf("model", "%s: listed message %s (UUID %s) is unknown to the model", opNames[o.kind], info.Ref, itemUUID)
			return
		}
		if out != redisdelay.OutcomeApplied && out != redisdelay.OutcomeInFlight {
			return
		}
		targets := []*slot{s}
		if s.batch != nil {
			targets = s.batch.items
			if r.batches[s.batch.key] == s.batch {
				r.closeBatch(s.batch) // acted on for a group: the next item opens a new batch
			}
		}
		for _, t := range targets {
			e := t.groups[gname]
			if e == nil {
				r.failf("model", "%s %s: %s in %s, which the model says never held it", opNames[o.kind], info.Ref, out, gname)
				return
			}
			switch {
			case o.kind == opCancelRef && out == redisdelay.OutcomeApplied:
				e.exp, e.neverAfter = expNever, end
			case o.kind == opCancelRef:
				if e.exp == expMust {
					e.exp = expMay
				}
			case out == redisdelay.OutcomeApplied:
				e.reschedule(due, due, end)
				e.mayBeInFlight = false // applied: the group held it due
			}
		}

	case opNack:
		r.mu.Lock()
		g.nackNext++
		r.mu.Unlock()

	case opCrash:
		if !g.registered {
			return
		}
		r.crash(o.group)

	case opRequeue:
		if !g.registered {
			return
		}
		if _, err := r.in.Requeue(ctx, r.topic, gname); err != nil {
			r.failf("error", "requeue %s: %v", gname, err)
		}

	case opPurge:
		if !g.registered {
			return
		}
		r.purgeScheduled(o.group, false)

	case opPause, opResume:
		if !g.registered {
			return
		}
		var err error
		if o.kind == opPause {
			err = r.in.Pause(ctx, r.topic, gname)
		} else {
			err = r.in.Resume(ctx, r.topic, gname)
		}
		if err != nil {
			r.failf("error", "%s %s: %v", opNames[o.kind], gname, err)
			return
		}
		r.mu.Lock()
		g.paused = o.kind == opPause
		r.mu.Unlock()

	case opFlushBatch, opCancelBatch:
		bk := fmt.Sprintf("b%d", o.key)
		start := time.Now()
		var n int
		var err error
		if o.kind == opFlushBatch {
			n, err = batchItems(r.in.RunNow(ctx, r.topic, redisdelay.ByBatchKey(bk)))
		} else {
			n, err = batchItems(r.in.Cancel(ctx, r.topic, redisdelay.ByBatchKey(bk)))
		}
		if err != nil {
			r.failf("error", "%s %s: %v", opNames[o.kind], bk, err)
			return
		}
		end := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		b := r.batches[bk]
		want := 0
		if b != nil {
			want = len(b.items)
		}
		if n != want {
			r.failf("count", "%s %s returned %d items, the model's open batch has %d", opNames[o.kind], bk, n, want)
		}
		if b == nil {
			return
		}
		if o.kind == opFlushBatch {
			r.releaseBatch(b, start)
			return
		}
		for _, s := range b.items {
			for _, e := range s.groups {
				if e.exp != expNever {
					e.exp, e.neverAfter = expNever, end
				}
			}
		}
		delete(r.batches, bk)
	}
}

// parseOps reads operations in the form op.String writes, one a line or separated by ';'.
func parseOps(text string) ([]op, error) {
	var ops []op
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ';' }) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		o := op{kind: -1, key: -1}
		for k, name := range opNames {
			if name == fields[0] {
				o.kind = opKind(k)
			}
		}
		if o.kind < 0 {
			return nil, fmt.Errorf("unknown operation %q", line)
		}
		for _, f := range fields[1:] {
			name, value, hasValue := strings.Cut(f, "=")
			var err error
			switch {
			case !hasValue && len(f) > 1 && strings.ContainsRune("gkb", rune(f[0])):
				var n int
				n, err = strconv.Atoi(f[1:])
				if f[0] == 'g' {
					o.group = n
				} else {
					o.key = n
				}
			case name == "delay":
				o.delay, err = time.ParseDuration(value)
			case name == "key":
				o.key, err = strconv.Atoi(strings.TrimPrefix(value, "k"))
			case name == "on_duplicate":
				o.policy = value
			case name == "pick":
				o.pick, err = strconv.Atoi(value)
			default:
				err = errors.New("unknown field")
			}
			if err != nil {
				return nil, fmt.Errorf("operation %q: field %q: %v", line, f, err)
			}
		}
		ops = append(ops, o)
	}
	return ops, nil
}

package schedule

// This file owns the calls that publish a schedule's message out of its spec: Trigger (now) and
// Backfill (the ticks of a past range).

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/seam"
)

// Trigger publishes the schedule's message now, out of its spec, with the Redis clock's now as
// its tick time and key TickKey(name, now) with "!" appended; the spec's ticks go on as before.
// It returns the message's UUID, an error wrapping redisdelay.ErrNotFound, or Publish's errors.
func (s *Scheduler) Trigger(ctx context.Context, name string) (string, error) {
	cctx, cancel := s.callContext(ctx)
	defer cancel()
	_, c, now, err := s.read(cctx, name)
	if err != nil {
		return "", s.errorf("trigger", name, err)
	}
	msg := c.tickMessage(now, TickKey(name, now)+"!")
	if _, err := s.pub.Publish(ctx, c.Topic, []*message.Message{msg}, s.tickOptions(nil, 0)); err != nil {
		return "", s.errorf("trigger", name, err)
	}
	return msg.UUID, nil
}

// BackfillResult is what Backfill published.
type BackfillResult struct {
	// Published counts the ticks whose message was published.
	Published int
	// Duplicates counts the ticks whose message key was taken (the tick was published already,
	// and its message is still held or within TickKeyRetention): nothing was stored for them.
	Duplicates int
}

// Backfill publishes, due at once, one message for each tick of the schedule's spec from from
// to to (both included, nominal times), each with its nominal time and TickKey, oldest first:
// a tick whose key is taken stores nothing (see BackfillResult). Every tick of the range is
// published, or the error says how many were. It refuses, before publishing anything, with an
// error wrapping ErrInvalid: a range of more than MaxBackfillTicks ticks, a range that ends
// more than redisdelay.MaxDelay after the Redis clock's now (also wrapping
// redisdelay.ErrBeyondMaxDelay), and a gap of more than Horizon without a tick inside the
// range. It returns an error wrapping redisdelay.ErrNotFound, ctx's error when ctx ends
// (checked between ticks), or Publish's errors; ticks published before an error stay
// published, and the error says how many there were.
func (s *Scheduler) Backfill(ctx context.Context, name string, from, to time.Time) (BackfillResult, error) {
	cctx, cancel := s.callContext(ctx)
	_, c, now, err := s.read(cctx, name)
	cancel()
	if err != nil {
		return BackfillResult{}, s.errorf("backfill", name, err)
	}
	rangeText := from.UTC().Format(time.RFC3339) + " to " + to.UTC().Format(time.RFC3339)
	if err := seam.CheckAhead(to.Sub(now)); err != nil {
		return BackfillResult{}, scheduleError(name, "backfill range", rangeText, err)
	}
	ticks, err := c.ticksBetween(ctx, from, to)
	switch {
	case err != nil && ctx.Err() != nil:
		return BackfillResult{}, s.errorf("backfill", name, fmt.Errorf("nothing published: %w", err))
	case err != nil:
		return BackfillResult{}, scheduleError(name, "backfill range", rangeText, fmt.Errorf("%w; nothing published", err))
	}
	var res BackfillResult
	for len(ticks) > 0 {
		chunk := ticks[:min(len(ticks), 100)]
		ticks = ticks[len(chunk):]
		msgs := make([]*message.Message, len(chunk))
		for i, t := range chunk {
			msgs[i] = c.tickMessage(t, TickKey(name, t))
		}
		dups, err := s.publishBackfill(ctx, c.Topic, msgs)
		if err != nil {
			return res, s.errorf("backfill", name, fmt.Errorf("%d of %d ticks published before: %w", res.Published+res.Duplicates, res.Published+res.Duplicates+len(chunk)+len(ticks), err))
		}
		res.Duplicates, res.Published = res.Duplicates+dups, res.Published+len(chunk)-dups
	}
	return res, nil
}

// publishBackfill publishes one chunk of a backfill, due at once, unless ctx has ended (a
// chunk under way is not cut short by it), and returns how many were Duplicates.
func (s *Scheduler) publishBackfill(ctx context.Context, topic string, msgs []*message.Message) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.pub.Publish(context.WithoutCancel(ctx), topic, msgs, s.tickOptions(nil, 0))
}

// ticksBetween returns the ticks from from to to, both included: at most MaxBackfillTicks, each
// found within Horizon of the one before, until ctx ends.
func (c *compiledSchedule) ticksBetween(ctx context.Context, from, to time.Time) ([]time.Time, error) {
	var ticks []time.Time
	for t := from.Add(-time.Millisecond); ; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		next, err := c.nextTick(t)
		switch {
		case err != nil && !t.Add(Horizon).Before(to):
			return ticks, nil // the search covered the rest of the range
		case err != nil:
			return nil, fmt.Errorf("has no tick within Horizon (%s) after %s", Horizon, t.UTC().Format(time.RFC3339))
		case next.After(to):
			return ticks, nil
		case len(ticks) == MaxBackfillTicks:
			return nil, fmt.Errorf("holds more than %d ticks", MaxBackfillTicks)
		}
		ticks, t = append(ticks, next), next
	}
}

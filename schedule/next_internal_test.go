package schedule

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTickSearchStopsWithItsContext: a backfill's tick search checks its context between
// ticks, so a CLI's --timeout or SIGTERM ends it.
func TestTickSearchStopsWithItsContext(t *testing.T) {
	c, err := Schedule{Name: "s", Spec: "* * * * * *", Topic: "t"}.compile()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ticks, err := c.ticksBetween(ctx, from, from.Add(time.Hour))
	if !errors.Is(err, context.Canceled) || len(ticks) != 0 {
		t.Fatalf("got %d ticks, %v; want none and context.Canceled", len(ticks), err)
	}
	ticks, err = c.ticksBetween(context.Background(), from, from.Add(10*time.Second))
	if err != nil || len(ticks) != 11 {
		t.Fatalf("got %d ticks, %v; want 11", len(ticks), err)
	}
}

// TestAStoredDefinitionIsReadWithoutTheLimitsPutAddedLater: a schedule an older version stored
// with "Local" or a spec naming no day still lists and ticks; Put refuses both.
func TestAStoredDefinitionIsReadWithoutTheLimitsPutAddedLater(t *testing.T) {
	for _, def := range []string{
		`{"spec":"0 3 * * *","tz":"Local","topic":"t","overlap":"allow-all","catch_up":"all","catch_up_window_ms":60000}`,
		`{"spec":"0 0 30 2 *","topic":"t","overlap":"allow-all","catch_up":"all","catch_up_window_ms":60000}`,
	} {
		c, err := decodeSchedule("old", def)
		if err != nil {
			t.Fatalf("stored %s: %v", def, err)
		}
		if _, err := c.Schedule.compile(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Put of %s: got %v, want ErrInvalid", def, err)
		}
	}
}

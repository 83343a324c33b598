package dashboard

// This file owns Thresholds: when a figure of a group shows as a warning or an alarm.

import (
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// The defaults of Thresholds.
const (
	// DefaultOverdueWarning is the oldest due age from which a group shows a warning: with
	// consumers running, a due message is claimed within milliseconds.
	DefaultOverdueWarning = 30 * time.Second
	// DefaultOverdueAlarm is the oldest due age from which a group shows an alarm.
	DefaultOverdueAlarm = 5 * time.Minute
	// DefaultDeadLettersWarning is the dead-letter count from which a group shows a warning:
	// every dead letter is a message that no handler could process.
	DefaultDeadLettersWarning = 1
	// DefaultDeadLettersAlarm is the dead-letter count from which a group shows an alarm.
	DefaultDeadLettersAlarm = 100
)

// Thresholds set when the overview and the group pages colour a figure as a warning (amber)
// or an alarm (red). A figure at or above a threshold takes its colour. The zero value of a
// field means its default; a negative value turns that colour off.
type Thresholds struct {
	// OverdueWarning and OverdueAlarm apply to a group's oldest due age
	// (redisdelay.GroupStats.OldestDueAge: how long its oldest message that is due now has
	// waited for a consumer, on the Redis clock); DefaultOverdueWarning and
	// DefaultOverdueAlarm when zero.
	OverdueWarning, OverdueAlarm time.Duration
	// DeadLettersWarning and DeadLettersAlarm apply to a group's dead letters
	// (redisdelay.GroupStats.DeadLetters), a count; DefaultDeadLettersWarning and
	// DefaultDeadLettersAlarm when zero.
	DeadLettersWarning, DeadLettersAlarm int64
	// PausedAlarm shows a paused group (redisdelay.Inspector.Pause) as an alarm; by default
	// it is a warning.
	PausedAlarm bool
}

// withDefaults returns t with each zero field set to its default.
func (t Thresholds) withDefaults() Thresholds {
	if t.OverdueWarning == 0 {
		t.OverdueWarning = DefaultOverdueWarning
	}
	if t.OverdueAlarm == 0 {
		t.OverdueAlarm = DefaultOverdueAlarm
	}
	if t.DeadLettersWarning == 0 {
		t.DeadLettersWarning = DefaultDeadLettersWarning
	}
	if t.DeadLettersAlarm == 0 {
		t.DeadLettersAlarm = DefaultDeadLettersAlarm
	}
	return t
}

// level is how urgently a figure needs an operator: "" (no colour), "warn" or "alarm", the
// CSS class and data-level value of its cell.
type level string

const (
	levelNone  level = ""
	levelWarn  level = "warn"
	levelAlarm level = "alarm"
)

// levelOf returns the level of v against the thresholds warn and alarm; a negative threshold
// never applies.
func levelOf[T int64 | time.Duration](v, warn, alarm T) level {
	switch {
	case alarm >= 0 && v >= alarm:
		return levelAlarm
	case warn >= 0 && v >= warn:
		return levelWarn
	}
	return levelNone
}

// worst returns the more urgent of a and b.
func worst(a, b level) level {
	switch {
	case a == levelAlarm || b == levelAlarm:
		return levelAlarm
	case a == levelWarn || b == levelWarn:
		return levelWarn
	}
	return levelNone
}

// groupLevels are the levels of one group's figures.
type groupLevels struct {
	Overdue, Dead, Paused, Row level
}

// levels returns the levels of a group's figures, and of its row: the worst of them.
func (t Thresholds) levels(st redisdelay.GroupStats) groupLevels {
	l := groupLevels{Dead: levelOf(st.DeadLetters, t.DeadLettersWarning, t.DeadLettersAlarm)}
	if st.Due > 0 {
		l.Overdue = levelOf(st.OldestDueAge, t.OverdueWarning, t.OverdueAlarm)
	}
	if st.Paused {
		l.Paused = levelWarn
		if t.PausedAlarm {
			l.Paused = levelAlarm
		}
	}
	l.Row = worst(worst(l.Overdue, l.Dead), l.Paused)
	return l
}

package main

// The read-only commands topics and stats (list and show are in messages.go). Each prints the
// Inspector's answer through a view type, whose JSON names are snake_case and whose states are
// words.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

type topicView struct {
	Topic      string   `json:"topic"`
	Partitions int      `json:"partitions"`
	Groups     []string `json:"groups"`
}

func (a *app) topicsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "topics",
		Short: "List the topics with their partitions and consumer groups",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topics, err := a.in.Topics(cmd.Context())
			if err != nil {
				return err
			}
			views := make([]topicView, len(topics))
			for n, t := range topics {
				views[n] = topicView{Topic: t.Topic, Partitions: t.Partitions, Groups: t.Groups}
			}
			return a.print(views, func(w *tabwriter.Writer) {
				row(w, "TOPIC", "PARTITIONS", "GROUPS")
				for _, t := range views {
					row(w, t.Topic, strconv.Itoa(t.Partitions), strings.Join(t.Groups, ","))
				}
				if len(views) == 0 {
					a.hintNoTopics()
				}
			})
		},
	}
}

type statsView struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Scheduled int64  `json:"scheduled"`
	// InCompactTier are those of Scheduled in the compact tier (GroupStats.Compact).
	InCompactTier       int64      `json:"in_compact_tier"`
	Due                 int64      `json:"due"`
	InFlight            int64      `json:"in_flight"`
	DeadLetters         int64      `json:"dead_letters"`
	OldestDueAgeSeconds float64    `json:"oldest_due_age_seconds"`
	NextDue             *time.Time `json:"next_due,omitempty"`
	Paused              bool       `json:"paused"`
	// Parked is set on the row of a topic with no consumer group (Group ""): its counts are the
	// messages that wait for the first group. Never on an Internal topic's row.
	Parked bool `json:"parked,omitempty"`
	// Internal is set on the rows of the library's own topics (internalTopic): schedule.TickTopic,
	// whose messages are the schedules' ticks, acted on by Schedulers, not an application's queue.
	Internal bool `json:"internal,omitempty"`
}

func (a *app) statsCommand() *cobra.Command {
	var (
		topics   []string
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count each consumer group's messages by state",
		Long: "Count each consumer group's messages by state, for the given topics or every topic.\n" +
			"With --watch, print the counts again every --interval until interrupted (SIGINT or SIGTERM);\n" +
			"with --output json, one document per count.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if !watch {
				return a.printStats(ctx, topics)
			}
			if interval <= 0 {
				return fmt.Errorf("--interval is %s, want > 0", interval)
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				if err := a.printStats(ctx, topics); err != nil {
					if ctx.Err() != nil {
						return nil // interrupted during the call
					}
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				if a.output == "table" {
					fmt.Fprintln(a.stdout) // a blank line between tables
				}
			}
		},
	}
	cmd.Flags().StringArrayVar(&topics, "topic", nil, "topic to count (repeatable); every topic when none")
	cmd.Flags().BoolVar(&watch, "watch", false, "print again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "pause between counts with --watch")
	return cmd
}

func (a *app) printStats(ctx context.Context, topics []string) error {
	stats, err := a.in.Stats(ctx, topics...)
	if err != nil {
		return err
	}
	views := make([]statsView, len(stats))
	for n, s := range stats {
		views[n] = statsView{
			Topic: s.Topic, Group: s.Group, Scheduled: s.Scheduled, InCompactTier: s.Compact, Due: s.Due, InFlight: s.InFlight,
			DeadLetters: s.DeadLetters, OldestDueAgeSeconds: s.OldestDueAge.Seconds(), NextDue: optionalTime(s.NextDue), Paused: s.Paused,
			Internal: internalTopic(s.Topic),
		}
		views[n].Parked = s.Group == redisdelay.ParkedGroup && !views[n].Internal
	}
	return a.print(views, func(w *tabwriter.Writer) {
		if len(views) == 0 && len(topics) == 0 {
			a.hintNoTopics()
		}
		row(w, "TOPIC", "GROUP", "SCHEDULED", "IN COMPACT TIER", "DUE", "IN FLIGHT", "DEAD LETTERS", "OLDEST DUE AGE", "NEXT DUE", "PAUSED")
		for n, v := range views {
			age := "-"
			if v.Due > 0 {
				age = stats[n].OldestDueAge.Round(time.Millisecond).String()
			}
			topic, group := v.Topic, v.Group
			switch {
			case v.Internal && v.Group == redisdelay.ParkedGroup:
				topic, group = v.Topic+" "+internalLabel, noSchedulerLabel
			case v.Internal:
				topic = v.Topic + " " + internalLabel
			case v.Parked:
				group = parkedLabel
			}
			row(w, topic, group, itoa(v.Scheduled), itoa(v.InCompactTier), itoa(v.Due), itoa(v.InFlight), itoa(v.DeadLetters),
				age, formatTime(stats[n].NextDue), strconv.FormatBool(v.Paused))
		}
		a.statsNotes(w, views)
	})
}

// statsNotes explains below the stats table the labels that its rows use.
func (a *app) statsNotes(w io.Writer, views []statsView) {
	if slices.ContainsFunc(views, func(v statsView) bool { return v.Parked }) {
		fmt.Fprintln(w, parkedLabel+": the topic has no consumer group; its messages wait for the first (list them with list --parked)")
	}
	if slices.ContainsFunc(views, func(v statsView) bool { return v.Internal }) {
		fmt.Fprintln(w, internalLabel+": the topic of the schedules' ticks, which Schedulers (schedule.Scheduler.Run) act on; not a queue of the application")
	}
	if slices.ContainsFunc(views, func(v statsView) bool { return v.Internal && v.Group == redisdelay.ParkedGroup }) {
		fmt.Fprintln(w, noSchedulerLabel+": no Scheduler has ever run under this key prefix: the schedules do not tick until one runs (schedule.Scheduler.Run)")
	}
}

// The labels of stats: internalLabel follows the name of an internal topic, noSchedulerLabel
// stands for the group of the tick topic when no Scheduler has registered on it.
const (
	internalLabel    = "(internal)"
	noSchedulerLabel = "(no Scheduler)"
)

// internalTopic reports whether topic is one of the library's own: schedule.TickTopic and the
// dead-letter topic of its Schedulers' group.
func internalTopic(topic string) bool {
	return topic == schedule.TickTopic || topic == redisdelay.DefaultDeadLetterTopic(schedule.TickTopic, schedule.TickGroup)
}

// parkedLabel stands in a table for the group of a topic with no consumer group.
const parkedLabel = "(parked)"

// hintNoTopics tells, on stderr, where topics and stats looked when they found no topic: the
// likeliest cause is a key prefix other than --prefix.
func (a *app) hintNoTopics() {
	fmt.Fprintf(a.stderr, "No topics under the key prefix %s on this Redis; for queues written with another KeyPrefix, pass it as --prefix.\n", printable(a.prefix))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

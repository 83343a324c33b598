package main

// The read-only commands topics and stats (list and show are in messages.go). Each prints the
// Inspector's answer through a view type, whose JSON names are snake_case and whose states are
// words.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
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
	// messages that wait for the first group.
	Parked bool `json:"parked,omitempty"`
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
			Parked: s.Group == redisdelay.ParkedGroup,
		}
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
			group := v.Group
			if v.Parked {
				group = parkedLabel
			}
			row(w, v.Topic, group, itoa(v.Scheduled), itoa(v.InCompactTier), itoa(v.Due), itoa(v.InFlight), itoa(v.DeadLetters),
				age, formatTime(stats[n].NextDue), strconv.FormatBool(v.Paused))
		}
		if slices.ContainsFunc(views, func(v statsView) bool { return v.Parked }) {
			fmt.Fprintln(w, parkedLabel+": the topic has no consumer group; its messages wait for the first (list them with list --parked)")
		}
	})
}

// parkedLabel stands in a table for the group of a topic with no consumer group.
const parkedLabel = "(parked)"

// hintNoTopics tells, on stderr, where topics and stats looked when they found no topic: the
// likeliest cause is a key prefix other than --prefix.
func (a *app) hintNoTopics() {
	fmt.Fprintf(a.stderr, "No topics under the key prefix %s on this Redis; for queues written with another KeyPrefix, pass it as --prefix.\n", printable(a.prefix))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

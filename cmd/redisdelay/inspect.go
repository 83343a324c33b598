package main

// The read-only commands: topics, stats, list and show. Each prints the Inspector's answer
// through a view type, whose JSON names are snake_case and whose states are words.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

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

// messageView is a redisdelay.MessageInfo. The whole payload (show only) is in Payload when it
// is UTF-8 text, and in PayloadBase64 otherwise. For a dead letter, DueAt is when it was
// dead-lettered, Attempt the attempts it had, Reason why the last one failed, and Key the key
// it had.
type messageView struct {
	Topic         string            `json:"topic"`
	Group         string            `json:"group"`
	Ref           string            `json:"ref"`
	ID            string            `json:"id"`
	UUID          string            `json:"uuid,omitempty"`
	Key           string            `json:"key,omitempty"`
	State         string            `json:"state"`
	DueAt         *time.Time        `json:"due_at,omitempty"`
	LeaseDeadline *time.Time        `json:"lease_deadline,omitempty"`
	Attempt       int               `json:"attempt"`
	Reason        string            `json:"reason,omitempty"`
	PayloadSize   int               `json:"payload_size"`
	Preview       string            `json:"preview,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Payload       string            `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Vanished      bool              `json:"vanished,omitempty"`
}

func newMessageView(m redisdelay.MessageInfo) messageView {
	v := messageView{
		Topic: m.Topic, Group: m.Group, Ref: m.Ref, ID: m.ID, UUID: m.UUID, Key: m.Key,
		State: m.State.String(), DueAt: optionalTime(m.DueAt), LeaseDeadline: optionalTime(m.LeaseDeadline), Attempt: m.Attempt, Reason: m.Reason,
		PayloadSize: m.PayloadSize, Preview: m.Preview, Metadata: m.Metadata, Vanished: m.Vanished,
	}
	if utf8.Valid(m.Payload) {
		v.Payload = string(m.Payload)
	} else {
		v.PayloadBase64 = m.Payload
	}
	return v
}

// when is the time that orders the message in its state: the lease deadline in flight, the due
// time otherwise.
func (v messageView) when() time.Time {
	if v.LeaseDeadline != nil {
		return *v.LeaseDeadline
	}
	return deref(v.DueAt)
}

type pageView struct {
	Messages   []messageView `json:"messages"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

func (a *app) listCommand() *cobra.Command {
	var (
		topic, group, state, cursor string
		limit                       int
	)
	var parked bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List one page of a consumer group's messages in one state",
		Long: "List one page of a consumer group's messages in one state, or with --parked those of a topic\n" +
			"with no consumer group, which wait for the first group (state scheduled or due).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if parked {
				group = redisdelay.ParkedGroup
			}
			page, err := a.in.List(cmd.Context(), topic, group, redisdelay.ListOptions{
				State: redisdelay.State(state), Cursor: cursor, Limit: limit,
			})
			if err != nil {
				return err
			}
			v := pageView{Messages: make([]messageView, len(page.Messages)), NextCursor: page.NextCursor}
			for n, m := range page.Messages {
				v.Messages[n] = newMessageView(m)
			}
			dead := redisdelay.State(state) == redisdelay.StateDeadLettered
			return a.print(v, func(w *tabwriter.Writer) {
				switch {
				case dead:
					row(w, "REF", "ID", "UUID", "KEY", "DEAD-LETTERED AT", "ATTEMPTS", "REASON", "SIZE", "PREVIEW")
				case redisdelay.State(state) == redisdelay.StateInFlight:
					row(w, "REF", "ID", "UUID", "KEY", "LEASE DEADLINE", "ATTEMPT", "SIZE", "PREVIEW")
				default:
					row(w, "REF", "ID", "UUID", "KEY", "DUE AT", "ATTEMPT", "SIZE", "PREVIEW")
				}
				for _, m := range v.Messages {
					preview := m.Preview
					if m.Vanished {
						preview = "(vanished)"
					}
					cells := []string{m.Ref, m.ID, orDash(m.UUID), orDash(m.Key), formatTime(m.when()), strconv.Itoa(m.Attempt)}
					if dead {
						cells = append(cells, orDash(m.Reason))
					}
					row(w, append(cells, strconv.Itoa(m.PayloadSize), preview)...)
				}
				if v.NextCursor != "" {
					fmt.Fprintf(w, "next page: --cursor %s\n", printable(v.NextCursor))
				}
			})
		},
	}
	addGroupFlags(cmd, &topic, &group)
	cmd.Flags().StringVar(&state, "state", "", "scheduled, due, in-flight or dead-lettered (required)")
	cmd.Flags().IntVar(&limit, "limit", 0, "most messages on the page; 0 means the Inspector's default")
	cmd.Flags().StringVar(&cursor, "cursor", "", "the next cursor the previous page printed")
	addParkedFlag(cmd, &parked)
	_ = cmd.MarkFlagRequired("state")
	return cmd
}

// addParkedFlag adds --parked, which names the messages of a topic with no consumer group
// instead of a group's.
func addParkedFlag(cmd *cobra.Command, parked *bool) {
	cmd.Flags().BoolVar(parked, "parked", false, "the messages of a topic with no consumer group, which wait for the first group")
	cmd.MarkFlagsMutuallyExclusive("parked", "group")
}

func (a *app) showCommand() *cobra.Command {
	var topic, group, key, ref, state string
	var parked bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show one message or dead letter of a consumer group with its metadata and whole payload",
		Long: "Show one message of a consumer group, by --key or by a --ref that list printed, with its metadata\n" +
			"and whole payload. A ref from list --state dead-lettered shows the dead letter, with its reason,\n" +
			"attempts and the time it was dead-lettered.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var m redisdelay.MessageInfo
			var err error
			if parked {
				group = redisdelay.ParkedGroup
			}
			if key != "" {
				m, err = a.in.Message(cmd.Context(), topic, redisdelay.ByKey(key).InGroup(group))
			} else {
				m, err = a.byRef(cmd.Context(), topic, group, ref, redisdelay.State(state))
			}
			if err != nil {
				return err
			}
			v := newMessageView(m)
			return a.print(v, func(w *tabwriter.Writer) {
				fields := [][2]string{
					{"topic", v.Topic}, {"group", v.Group}, {"ref", v.Ref}, {"id", v.ID},
					{"uuid", orDash(v.UUID)}, {"key", orDash(v.Key)}, {"state", v.State},
					{"due at", formatTime(deref(v.DueAt))}, {"lease deadline", formatTime(deref(v.LeaseDeadline))},
					{"attempt", strconv.Itoa(v.Attempt)}, {"payload size", strconv.Itoa(v.PayloadSize)},
				}
				if m.State == redisdelay.StateDeadLettered {
					fields = [][2]string{
						{"topic", v.Topic}, {"group", v.Group}, {"ref", v.Ref}, {"id", v.ID},
						{"uuid", orDash(v.UUID)}, {"key", orDash(v.Key)}, {"state", v.State},
						{"dead-lettered at", formatTime(deref(v.DueAt))}, {"attempts", strconv.Itoa(v.Attempt)},
						{"reason", orDash(v.Reason)}, {"payload size", strconv.Itoa(v.PayloadSize)},
					}
				}
				for _, field := range fields {
					row(w, field[0]+":", field[1])
				}
				label := "metadata:"
				for _, k := range slices.Sorted(maps.Keys(v.Metadata)) {
					row(w, label, printable(k)+"="+printable(v.Metadata[k]))
					label = ""
				}
				_ = w.Flush()
				a.printPayload(v.Payload, v.PayloadBase64, v.Vanished)
			})
		},
	}
	addGroupFlags(cmd, &topic, &group)
	cmd.Flags().StringVar(&key, "key", "", "the message's key")
	cmd.Flags().StringVar(&ref, "ref", "", "the message's ref, as list prints it")
	cmd.Flags().StringVar(&state, "state", "", "with --ref: dead-lettered for a dead letter, scheduled, due or in-flight for a message the group holds; when empty, whichever the ref names")
	cmd.MarkFlagsOneRequired("key", "ref")
	cmd.MarkFlagsMutuallyExclusive("key", "ref")
	cmd.MarkFlagsMutuallyExclusive("key", "state")
	addParkedFlag(cmd, &parked)
	cmd.MarkFlagsMutuallyExclusive("parked", "key")
	return cmd
}

// printPayload prints a payload below the aligned fields of show: text (when raw is nil) as it
// is when it holds no control characters but newlines and tabs, else quoted; raw, which is not
// UTF-8, as a hex dump.
func (a *app) printPayload(text string, raw []byte, vanished bool) {
	switch {
	case vanished:
		fmt.Fprintln(a.stdout, "payload: (vanished)")
	case raw != nil:
		fmt.Fprint(a.stdout, "payload (not UTF-8):\n"+hex.Dump(raw))
	case !isPrintable(text, "\n\t"):
		fmt.Fprintln(a.stdout, "payload (with control characters, quoted):")
		fmt.Fprintln(a.stdout, strconv.Quote(text))
	default:
		fmt.Fprintln(a.stdout, "payload:")
		fmt.Fprintln(a.stdout, text)
	}
}

// byRef reads what ref names in group: a dead letter for StateDeadLettered, a message the group
// holds for the other states, and for "" whichever of the two it names. A ref of a message and
// one of a dead letter can look alike (each topic numbers its messages), so a ref that names
// both is an error that asks for --state.
func (a *app) byRef(ctx context.Context, topic, group, ref string, state redisdelay.State) (redisdelay.MessageInfo, error) {
	switch {
	case state == redisdelay.StateDeadLettered:
		return a.in.Message(ctx, topic, redisdelay.ByDeadLetter(group, ref))
	case state == redisdelay.StateScheduled, state == redisdelay.StateDue, state == redisdelay.StateInFlight,
		group == redisdelay.ParkedGroup && state == "": // parked messages have no dead letters
		return a.in.Message(ctx, topic, redisdelay.ByRef(group, ref))
	case state != "":
		return redisdelay.MessageInfo{}, fmt.Errorf("--state is %q, want scheduled, due, in-flight or dead-lettered", state)
	}
	m, err := a.in.Message(ctx, topic, redisdelay.ByRef(group, ref))
	if err != nil && !errors.Is(err, redisdelay.ErrNotFound) {
		return m, err
	}
	d, deadErr := a.in.Message(ctx, topic, redisdelay.ByDeadLetter(group, ref))
	switch {
	case deadErr != nil && !errors.Is(deadErr, redisdelay.ErrNotFound):
		return d, deadErr
	case err == nil && deadErr == nil:
		return m, fmt.Errorf("ref %s names both a message of group %s and one of its dead letters; give --state", printable(ref), printable(group))
	case deadErr == nil:
		return d, nil
	}
	return m, err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

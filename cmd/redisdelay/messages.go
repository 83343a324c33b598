package main

// The message commands list and show: one page of a consumer group's messages in one state, and
// one message or dead letter in full. Both print a message through messageView.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
)

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
			} else if err := a.pickGroup(cmd.Context(), topic, &group, groupNeed{parked: true}); err != nil {
				return err
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
			return a.printPage(v, redisdelay.State(state))
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

// printPage prints a page of list, whose messages are all in state: a row per message, with
// the reason of a dead letter, and the cursor of the next page.
func (a *app) printPage(v pageView, state redisdelay.State) error {
	dead := state == redisdelay.StateDeadLettered
	return a.print(v, func(w *tabwriter.Writer) {
		row(w, pageHeader(state)...)
		for _, m := range v.Messages {
			row(w, m.listCells(dead)...)
		}
		if v.NextCursor != "" {
			fmt.Fprintf(w, "next page: --cursor %s\n", printable(v.NextCursor))
		}
	})
}

// pageHeader returns the header row of list for messages in state.
func pageHeader(state redisdelay.State) []string {
	switch state {
	case redisdelay.StateDeadLettered:
		return []string{"REF", "ID", "UUID", "KEY", "DEAD-LETTERED AT", "ATTEMPTS", "REASON", "SIZE", "PREVIEW"}
	case redisdelay.StateInFlight:
		return []string{"REF", "ID", "UUID", "KEY", "LEASE DEADLINE", "ATTEMPT", "SIZE", "PREVIEW"}
	}
	return []string{"REF", "ID", "UUID", "KEY", "DUE AT", "ATTEMPT", "SIZE", "PREVIEW"}
}

// listCells returns the row of list for v, under pageHeader: with the reason when dead (v is a
// dead letter).
func (v messageView) listCells(dead bool) []string {
	preview := v.Preview
	if v.Vanished {
		preview = "(vanished)"
	}
	cells := []string{v.Ref, v.ID, orDash(v.UUID), orDash(v.Key), formatTime(v.when()), strconv.Itoa(v.Attempt)}
	if dead {
		cells = append(cells, orDash(v.Reason))
	}
	return append(cells, strconv.Itoa(v.PayloadSize), preview)
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
			if parked {
				group = redisdelay.ParkedGroup
			} else if err := a.pickGroup(cmd.Context(), topic, &group, groupNeed{parked: true}); err != nil {
				return err
			}
			m, err := a.message(cmd.Context(), topic, group, key, ref, redisdelay.State(state))
			if err != nil {
				return err
			}
			return a.printMessage(newMessageView(m), m.State == redisdelay.StateDeadLettered)
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

// message reads what show names in group: the message with key when key is set, else what ref
// names (see byRef).
func (a *app) message(ctx context.Context, topic, group, key, ref string, state redisdelay.State) (redisdelay.MessageInfo, error) {
	if key != "" {
		return a.in.Message(ctx, topic, redisdelay.ByKey(key).InGroup(group))
	}
	return a.byRef(ctx, topic, group, ref, state)
}

// printMessage prints v as show does: its fields aligned (those of a dead letter when dead),
// its metadata sorted by name, then its payload (see printPayload).
func (a *app) printMessage(v messageView, dead bool) error {
	return a.print(v, func(w *tabwriter.Writer) {
		for _, field := range v.showFields(dead) {
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
}

// showFields returns the named fields that show prints for v, in order: for a dead letter
// (dead), when it was dead-lettered, its attempts and reason instead of the due time, lease
// deadline and attempt.
func (v messageView) showFields(dead bool) [][2]string {
	fields := [][2]string{
		{"topic", v.Topic}, {"group", v.Group}, {"ref", v.Ref}, {"id", v.ID},
		{"uuid", orDash(v.UUID)}, {"key", orDash(v.Key)}, {"state", v.State},
	}
	if dead {
		fields = append(fields, [][2]string{
			{"dead-lettered at", formatTime(deref(v.DueAt))}, {"attempts", strconv.Itoa(v.Attempt)},
			{"reason", orDash(v.Reason)},
		}...)
	} else {
		fields = append(fields, [][2]string{
			{"due at", formatTime(deref(v.DueAt))}, {"lease deadline", formatTime(deref(v.LeaseDeadline))},
			{"attempt", strconv.Itoa(v.Attempt)},
		}...)
	}
	return append(fields, [2]string{"payload size", strconv.Itoa(v.PayloadSize)})
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

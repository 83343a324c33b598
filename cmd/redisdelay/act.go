package main

// The commands that change a queue. The destructive ones (cancel, requeue, purge, remove-group)
// ask for confirmation unless --yes (a flag of every command, so that a script can pass it to
// any).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
)

// target is the message that cancel, reschedule and run-now act on: a key on a topic, which names
// the message in every consumer group, or a ref (as list prints it) in one group.
type target struct{ topic, group, key, ref string }

func (t *target) addFlags(cmd *cobra.Command) {
	addGroupFlags(cmd, &t.topic, &t.group)
	cmd.Flags().StringVar(&t.key, "key", "", "the message's key; acts in every consumer group")
	cmd.Flags().StringVar(&t.ref, "ref", "", "the message's ref in --group, as list prints it")
	cmd.MarkFlagsOneRequired("key", "ref")
	cmd.MarkFlagsMutuallyExclusive("key", "ref")
	// A key acts in every group; a --group beside it would suggest otherwise.
	cmd.MarkFlagsMutuallyExclusive("key", "group")
}

// pickGroup fills in t's group when t is a ref and --group was not given (see app.pickGroup);
// a key names the message in every group.
func (t *target) pickGroup(ctx context.Context, a *app) error {
	if t.ref == "" {
		return nil
	}
	return a.pickGroup(ctx, t.topic, &t.group, groupNeed{})
}

func (t target) String() string {
	if t.key != "" {
		return fmt.Sprintf("key %q on topic %q", t.key, t.topic)
	}
	return fmt.Sprintf("message %q of group %q on topic %q", t.ref, t.group, t.topic)
}

// address is the Inspector's name for t: ByKey or ByRef.
func (t target) address() redisdelay.Target {
	if t.key != "" {
		return redisdelay.ByKey(t.key)
	}
	return redisdelay.ByRef(t.group, t.ref)
}

// action is an Inspector action: Cancel, Reschedule, RescheduleAfter or RunNow.
type action func(ctx context.Context, topic string, t redisdelay.Target) (redisdelay.ActionResult, error)

// outcomeView is what cancel, reschedule or run-now did in each consumer group; ParkedGroup ("")
// is a message parked while the topic had no group.
type outcomeView struct {
	Topic  string            `json:"topic"`
	Key    string            `json:"key,omitempty"`
	Ref    string            `json:"ref,omitempty"`
	Groups map[string]string `json:"groups"`
	DueAt  *time.Time        `json:"due_at,omitempty"`
}

// outcomeWords says what an operation did in a consumer group, per outcome, for a table: the
// Outcome's own word ("applied", "in-flight") says less to a reader than "cancelled". JSON
// prints the Outcome's word.
type outcomeWords struct{ applied, inFlight string }

// The words of cancel, reschedule and run-now. A message in flight is cancelled all the same;
// reschedule and run-now leave it as it is.
var (
	cancelWords     = outcomeWords{applied: "cancelled", inFlight: "cancelled; the delivery under way finishes"}
	rescheduleWords = outcomeWords{applied: "rescheduled", inFlight: "unchanged: a delivery is under way"}
	runNowWords     = outcomeWords{applied: "due now", inFlight: "unchanged: a delivery is under way"}
)

// word returns what o says in a table.
func (w outcomeWords) word(o redisdelay.Outcome) string {
	switch o {
	case redisdelay.OutcomeApplied:
		return w.applied
	case redisdelay.OutcomeInFlight:
		return w.inFlight
	case redisdelay.OutcomeFinished:
		return "unchanged: the group is done with it"
	case redisdelay.OutcomeNotFound:
		return "not found"
	}
	return o.String()
}

// act runs op on t and prints the outcome in each group, in words. The Inspector reports a
// message that is not there as an outcome; act makes it an error wrapping ErrNotFound.
func (a *app) act(ctx context.Context, t target, words outcomeWords, op action) error {
	r, err := op(ctx, t.topic, t.address())
	if err != nil {
		return err
	}
	if !r.Found() {
		return fmt.Errorf("%s: %w", t, redisdelay.ErrNotFound)
	}
	v := outcomeView{Topic: t.topic, Key: t.key, Ref: t.ref, Groups: map[string]string{}, DueAt: optionalTime(r.DueAt)}
	for g, o := range r.Groups {
		v.Groups[g] = o.String()
	}
	return a.print(v, func(w *tabwriter.Writer) {
		row(w, "GROUP", "OUTCOME")
		for _, g := range slices.Sorted(maps.Keys(r.Groups)) {
			name := g
			if g == redisdelay.ParkedGroup {
				name = "(parked)"
			}
			row(w, name, words.word(r.Groups[g]))
		}
		if v.DueAt != nil {
			fmt.Fprintf(w, "due at %s\n", formatTime(*v.DueAt))
		}
	})
}

func (a *app) cancelCommand() *cobra.Command {
	var t target
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Cancel a message: by --key in every consumer group, or by --ref in one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := t.pickGroup(cmd.Context(), a); err != nil {
				return err
			}
			if err := a.confirm(fmt.Sprintf("Cancel %s?", t)); err != nil {
				return err
			}
			return a.act(cmd.Context(), t, cancelWords, a.in.Cancel)
		},
	}
	t.addFlags(cmd)
	return cmd
}

func (a *app) rescheduleCommand() *cobra.Command {
	var (
		t  target
		at string
		in time.Duration
	)
	cmd := &cobra.Command{
		Use:   "reschedule",
		Short: "Make a message due at another time, keeping its attempt count",
		Long:  "Make a message due at --at or --in from now, keeping its attempt count. --in counts on the\nRedis clock.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := t.pickGroup(cmd.Context(), a); err != nil {
				return err
			}
			var due time.Time
			if at != "" {
				var err error
				if due, err = time.Parse(time.RFC3339, at); err != nil {
					return fmt.Errorf("--at: %w", err)
				}
			}
			return a.act(cmd.Context(), t, rescheduleWords, func(ctx context.Context, topic string, t redisdelay.Target) (redisdelay.ActionResult, error) {
				if at != "" {
					return a.in.Reschedule(ctx, topic, t, due)
				}
				return a.in.RescheduleAfter(ctx, topic, t, in)
			})
		},
	}
	t.addFlags(cmd)
	cmd.Flags().StringVar(&at, "at", "", "new due time, RFC 3339 (2006-01-02T15:04:05Z07:00)")
	cmd.Flags().DurationVar(&in, "in", 0, "new due time as a delay from now, such as 10m")
	cmd.MarkFlagsOneRequired("at", "in")
	cmd.MarkFlagsMutuallyExclusive("at", "in")
	return cmd
}

func (a *app) runCommand() *cobra.Command {
	var t target
	cmd := &cobra.Command{
		Use:   "run-now",
		Short: "Make a message due at once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := t.pickGroup(cmd.Context(), a); err != nil {
				return err
			}
			return a.act(cmd.Context(), t, runNowWords, a.in.RunNow)
		},
	}
	t.addFlags(cmd)
	return cmd
}

func (a *app) requeueCommand() *cobra.Command {
	var (
		topic, group string
		refs         []string
		all          bool
	)
	cmd := &cobra.Command{
		Use:   "requeue",
		Short: "Move dead letters back to their consumer group, due at once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Requeue with no refs moves every dead letter: only --all may ask for that.
			if len(refs) == 0 && !all {
				return errors.New("give the dead letters to requeue with --ref, or --all")
			}
			if err := a.pickGroup(cmd.Context(), topic, &group, groupNeed{}); err != nil {
				return err
			}
			which := fmt.Sprintf("%d dead letters", len(refs))
			if all {
				which = "all dead letters"
			}
			if err := a.confirm(fmt.Sprintf("Requeue %s of group %s on topic %s?", which, group, topic)); err != nil {
				return err
			}
			n, err := a.in.Requeue(cmd.Context(), topic, group, refs...)
			if err != nil {
				return err
			}
			return a.printChange(topic, group, "requeued", n,
				fmt.Sprintf("Requeued %d dead letters of group %s on topic %s.", n, group, topic))
		},
	}
	addGroupFlags(cmd, &topic, &group)
	cmd.Flags().StringArrayVar(&refs, "ref", nil, "a dead letter's ref, as list --state dead-lettered prints it (repeatable)")
	cmd.Flags().BoolVar(&all, "all", false, "requeue every dead letter of the group")
	cmd.MarkFlagsMutuallyExclusive("ref", "all")
	return cmd
}

func (a *app) purgeCommand() *cobra.Command {
	var topic, group, state string
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Drop a consumer group's messages in one state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.pickGroup(cmd.Context(), topic, &group, groupNeed{}); err != nil {
				return err
			}
			if err := a.confirm(fmt.Sprintf("Purge the %s messages of group %s on topic %s?", state, group, topic)); err != nil {
				return err
			}
			n, err := a.in.Purge(cmd.Context(), topic, group, redisdelay.State(state))
			if err != nil {
				return err
			}
			return a.printChange(topic, group, "purged", n,
				fmt.Sprintf("Purged %d %s messages of group %s on topic %s.", n, state, group, topic))
		},
	}
	addGroupFlags(cmd, &topic, &group)
	cmd.Flags().StringVar(&state, "state", "", "scheduled, due or in-flight (required)")
	_ = cmd.MarkFlagRequired("state")
	return cmd
}

// pauseCommand is pause, or resume when pause is false.
func (a *app) pauseCommand(pause bool) *cobra.Command {
	var topic, group string
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume a paused consumer group",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.pickGroup(cmd.Context(), topic, &group, groupNeed{}); err != nil {
				return err
			}
			op, state := a.in.Resume, "resumed"
			if pause {
				op, state = a.in.Pause, "paused"
			}
			if err := op(cmd.Context(), topic, group); err != nil {
				return err
			}
			return a.printChange(topic, group, "paused", pause,
				fmt.Sprintf("Group %s on topic %s is %s.", group, topic, state))
		},
	}
	if pause {
		cmd.Use, cmd.Short = "pause", "Pause a consumer group: its subscribers receive nothing until resume"
	}
	addGroupFlags(cmd, &topic, &group)
	return cmd
}

func (a *app) deleteGroupCommand() *cobra.Command {
	var topic, group string
	cmd := &cobra.Command{
		Use:   "remove-group",
		Short: "Remove a consumer group from a topic with all its messages",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Removing a group drops its messages: the group is named, never inferred.
			if err := a.pickGroup(cmd.Context(), topic, &group, groupNeed{explicit: true}); err != nil {
				return err
			}
			if err := a.confirm(fmt.Sprintf("Remove group %s from topic %s?", group, topic)); err != nil {
				return err
			}
			n, err := a.in.RemoveGroup(cmd.Context(), topic, group)
			if err != nil {
				return err
			}
			return a.printChange(topic, group, "dropped", n,
				fmt.Sprintf("Removed group %s from topic %s and dropped %d messages.", group, topic, n))
		},
	}
	addGroupFlags(cmd, &topic, &group)
	cmd.Flags().Lookup("group").Usage = "consumer group to remove (required; without it, the error lists the topic's groups)"
	return cmd
}

// printChange prints what a command changed in a consumer group: one field besides topic and
// group in JSON, sentence in a table.
func (a *app) printChange(topic, group, field string, value any, sentence string) error {
	return a.print(map[string]any{"topic": topic, "group": group, field: value}, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, sentence)
	})
}

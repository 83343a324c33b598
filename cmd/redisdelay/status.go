package main

// The status command: where every consumer group of a topic stands with the message of one key.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
)

// keyGroupView is one consumer group's state with a key (redisdelay.KeyGroupStatus), with the
// message's ref in the group while the group holds it (scheduled or in flight). Times are on
// the Redis clock; a time that does not apply is left out.
type keyGroupView struct {
	Group         string     `json:"group"`
	State         string     `json:"state"`
	DueAt         *time.Time `json:"due_at,omitempty"`
	LeaseDeadline *time.Time `json:"lease_deadline,omitempty"`
	Attempt       int        `json:"attempt"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	Ref           string     `json:"ref,omitempty"`
	// Parked is set on the row of a message that waits for the topic's first group (Group "").
	Parked bool `json:"parked,omitempty"`
}

// keyStatusView is what status prints: the key's state in each group of the topic, by group
// name (the parked row first, when there is one).
type keyStatusView struct {
	Topic  string         `json:"topic"`
	Key    string         `json:"key"`
	Live   bool           `json:"live"`
	Groups []keyGroupView `json:"groups"`
}

func (a *app) statusCommand() *cobra.Command {
	var topic, key string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show where every consumer group of a topic stands with the message of a key",
		Long: "Show where every consumer group of the topic stands with the message of --key: its state\n" +
			"(scheduled, in-flight, or, while the publisher's KeyRetention keeps the history, acked,\n" +
			"dead-lettered or cancelled; not-found when the group knows nothing of it), due time or lease\n" +
			"deadline, attempt, and its ref in the group while the group holds it. A key that no group\n" +
			"knows is an error of kind not-found.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := a.keyStatus(cmd.Context(), topic, key)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) {
				row(w, "GROUP", "STATE", "DUE AT", "LEASE DEADLINE", "ATTEMPT", "REF", "FINISHED AT", "REASON")
				for _, g := range v.Groups {
					name := g.Group
					if g.Parked {
						name = parkedLabel
					}
					row(w, name, g.State, formatTime(deref(g.DueAt)), formatTime(deref(g.LeaseDeadline)),
						strconv.Itoa(g.Attempt), orDash(g.Ref), formatTime(deref(g.FinishedAt)), orDash(g.Reason))
				}
			})
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "topic (required)")
	cmd.Flags().StringVar(&key, "key", "", "the message's key (required)")
	_ = cmd.MarkFlagRequired("topic")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// keyStatus reads the state of key in every group of topic (Inspector.Status, ByKey: one
// script), then the ref in each group that holds the message (Inspector.Message,
// ByKey(key).InGroup(group): one read per such group). An unknown topic, or a key that no
// group knows, is an error wrapping ErrNotFound.
func (a *app) keyStatus(ctx context.Context, topic, key string) (keyStatusView, error) {
	st, err := a.in.Status(ctx, topic, redisdelay.ByKey(key))
	if err != nil {
		return keyStatusView{}, err
	}
	v := keyStatusView{Topic: topic, Key: key, Live: st.Live, Groups: []keyGroupView{}}
	known := false
	for _, g := range slices.Sorted(maps.Keys(st.Groups)) {
		gs := st.Groups[g]
		known = known || gs.State != redisdelay.StateNotFound
		gv := keyGroupView{
			Group: g, State: gs.State.String(), DueAt: optionalTime(gs.DueAt), LeaseDeadline: optionalTime(gs.LeaseDeadline),
			Attempt: gs.Attempt, FinishedAt: optionalTime(gs.FinishedAt), Reason: gs.Reason, Parked: g == redisdelay.ParkedGroup,
		}
		if (gs.State == redisdelay.StateScheduled || gs.State == redisdelay.StateInFlight) && !gv.Parked {
			if gv.Ref, err = a.refOf(ctx, topic, key, g); err != nil {
				return v, err
			}
		}
		v.Groups = append(v.Groups, gv)
	}
	if !known && len(st.Groups) == 0 {
		// Status reports no group for a topic it does not know: name the topic then.
		if _, err := a.groupsOf(ctx, topic); err != nil {
			return v, err
		}
	}
	if !known {
		return v, fmt.Errorf("key %q on topic %q: %w", key, topic, redisdelay.ErrNotFound)
	}
	return v, nil
}

// refOf returns the ref of the message with key in group, or "" when the group no longer holds
// it (it was acked or cancelled since Status read it).
func (a *app) refOf(ctx context.Context, topic, key, group string) (string, error) {
	m, err := a.in.Message(ctx, topic, redisdelay.ByKey(key).InGroup(group))
	if errors.Is(err, redisdelay.ErrNotFound) {
		return "", nil
	}
	return m.Ref, err
}

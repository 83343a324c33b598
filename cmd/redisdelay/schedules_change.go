package main

// The schedules commands that change a schedule: put, pause, resume, trigger, backfill and
// delete, through the Scheduler of app.scheduler, which never runs.

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

func (a *app) schedulesPutCommand() *cobra.Command {
	var p putFlags
	cmd := &cobra.Command{
		Use:   "put NAME",
		Short: "Create a schedule, or replace its definition",
		Long: "Create a schedule, or replace its definition with the one the flags give (a flag not given takes\n" +
			"its default, not the stored value). An unchanged definition changes nothing; a changed one\n" +
			"recomputes the next tick from now. A paused schedule stays paused.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := p.schedule(args[0])
			if err != nil {
				return err
			}
			sch, err := a.scheduler()
			if err != nil {
				return err
			}
			outcome, err := sch.Put(cmd.Context(), s)
			if err != nil {
				return err
			}
			return a.print(map[string]any{"schedule": s.Name, "outcome": outcome}, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Schedule %s: %s.\n", printable(s.Name), outcome)
			})
		},
	}
	p.register(cmd)
	return cmd
}

// putFlags are the flags of schedules put: a schedule's definition.
type putFlags struct {
	s                         schedule.Schedule
	overlap, catchUp, payload string
	metadata                  []string
}

// register adds the flags to cmd.
func (p *putFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&p.s.Spec, "spec", "", `when it ticks: a cron spec of 5 fields (6 with seconds first), "@every 1h", or @daily, @hourly, ... (required)`)
	f.StringVar(&p.s.Topic, "topic", "", "topic each tick's message is published to (required)")
	f.StringVar(&p.s.TimeZone, "tz", "", "IANA time zone the spec is read in, such as Europe/Berlin (default UTC; Local is refused)")
	f.StringVar(&p.payload, "payload", "", "each tick's message's payload")
	f.StringArrayVar(&p.metadata, "metadata", nil, "each tick's message's metadata, key=value (repeatable)")
	f.StringVar(&p.overlap, "overlap", "", "allow-all, skip or buffer-one (default allow-all)")
	f.StringVar(&p.catchUp, "catch-up", "", "all or latest (default all)")
	f.DurationVar(&p.s.CatchUpWindow, "catch-up-window", 0, "how late a tick may be and still be published (default 1m)")
	f.DurationVar(&p.s.Jitter, "jitter", 0, "most by which each tick's message is delayed, drawn per tick")
	_ = cmd.MarkFlagRequired("spec")
	_ = cmd.MarkFlagRequired("topic")
}

// schedule returns the schedule name the flags define, or an error naming a --metadata that is
// not key=value.
func (p *putFlags) schedule(name string) (schedule.Schedule, error) {
	s := p.s
	s.Name, s.Payload = name, []byte(p.payload)
	s.Overlap, s.CatchUp = schedule.OverlapPolicy(p.overlap), schedule.CatchUpPolicy(p.catchUp)
	for _, kv := range p.metadata {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return schedule.Schedule{}, fmt.Errorf("--metadata %q: want key=value", kv)
		}
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		s.Metadata[k] = v
	}
	return s, nil
}

// schedulesPauseCommand is pause, or resume when pause is false.
func (a *app) schedulesPauseCommand(pause bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "Resume a paused schedule: its next tick is the first after now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sch, err := a.scheduler()
			if err != nil {
				return err
			}
			name := args[0]
			op, state := sch.Resume, "resumed"
			if pause {
				op, state = sch.Pause, "paused"
			}
			changed, err := op(cmd.Context(), name)
			if err != nil {
				return err
			}
			sentence := fmt.Sprintf("Schedule %s is %s.", printable(name), state)
			if !changed {
				sentence = fmt.Sprintf("Schedule %s was %s already; nothing changed.", printable(name), state)
			}
			return a.print(map[string]any{"schedule": name, "paused": pause, "changed": changed}, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, sentence)
			})
		},
	}
	if pause {
		cmd.Use, cmd.Short = "pause NAME", "Pause a schedule: no tick falls due until resume, and the ticks of the pause are not caught up"
	}
	return cmd
}

func (a *app) schedulesTriggerCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger NAME",
		Short: "Publish the schedule's message now, out of its spec; the spec's ticks go on as before",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sch, err := a.scheduler()
			if err != nil {
				return err
			}
			uuid, err := sch.Trigger(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(map[string]any{"schedule": args[0], "uuid": uuid}, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Published the message of schedule %s now: UUID %s.\n", printable(args[0]), uuid)
			})
		},
	}
}

func (a *app) schedulesBackfillCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "backfill NAME",
		Short: "Publish, due at once, the message of each tick of the spec from --from to --to",
		Long: fmt.Sprintf("Publish, due at once, one message for each tick of the schedule's spec from --from to --to (both\n"+
			"included, nominal times), each with its tick time and the tick's key: a tick whose message was\n"+
			"published already (its key is still taken) is counted as a duplicate and stores nothing. At most\n"+
			"%d ticks.", schedule.MaxBackfillTicks),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			start, err := time.Parse(time.RFC3339, from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			end, err := time.Parse(time.RFC3339, to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			if end.Before(start) {
				return fmt.Errorf("--to %s is before --from %s", to, from)
			}
			if err := a.confirm(fmt.Sprintf("Publish the ticks of schedule %s from %s to %s?", printable(name), formatTime(start), formatTime(end))); err != nil {
				return err
			}
			sch, err := a.scheduler()
			if err != nil {
				return err
			}
			res, err := sch.Backfill(cmd.Context(), name, start, end)
			if err != nil {
				return err
			}
			return a.print(map[string]any{"schedule": name, "published": res.Published, "duplicates": res.Duplicates}, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Backfilled schedule %s: published %d ticks; %d were published already.\n", printable(name), res.Published, res.Duplicates)
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first tick time, RFC 3339 (2006-01-02T15:04:05Z07:00) (required)")
	cmd.Flags().StringVar(&to, "to", "", "last tick time, RFC 3339 (required)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func (a *app) schedulesDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule: none of its ticks is published after it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := a.confirm(fmt.Sprintf("Delete schedule %s?", printable(name))); err != nil {
				return err
			}
			sch, err := a.scheduler()
			if err != nil {
				return err
			}
			if err := sch.Delete(cmd.Context(), name); err != nil {
				return err
			}
			return a.print(map[string]any{"schedule": name, "deleted": true}, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Deleted schedule %s.\n", printable(name))
			})
		},
	}
}

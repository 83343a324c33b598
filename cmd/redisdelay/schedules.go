package main

// The schedules command group: list and show periodic schedules through the Inspector, and
// put, pause, resume, trigger, backfill and delete them through a Scheduler that never runs
// (its calls work without Run; the ticks are acted on by the Schedulers of the application).

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// scheduleView is a schedule.Info. Times are absolute instants, those of its state
// taken on the Redis clock; a time that does not apply is left out. The payload is in Payload
// when it is UTF-8 text, and in PayloadBase64 otherwise.
type scheduleView struct {
	Name                 string            `json:"name"`
	Spec                 string            `json:"spec"`
	TimeZone             string            `json:"time_zone,omitempty"`
	Topic                string            `json:"topic"`
	Overlap              string            `json:"overlap"`
	CatchUp              string            `json:"catch_up"`
	CatchUpWindowSeconds float64           `json:"catch_up_window_seconds"`
	JitterSeconds        float64           `json:"jitter_seconds"`
	Metadata             map[string]string `json:"metadata,omitempty"`
	Payload              string            `json:"payload,omitempty"`
	PayloadBase64        []byte            `json:"payload_base64,omitempty"`
	Version              string            `json:"version"`
	Paused               bool              `json:"paused"`
	Pending              *time.Time        `json:"pending,omitempty"`
	NextTicks            []time.Time       `json:"next_ticks"`
	LastTick             *time.Time        `json:"last_tick,omitempty"`
	LastKey              string            `json:"last_key,omitempty"`
	LastOutcome          string            `json:"last_outcome,omitempty"`
	LastOutcomeAt        *time.Time        `json:"last_outcome_at,omitempty"`
	Buffered             *time.Time        `json:"buffered,omitempty"`
	Published            int64             `json:"published"`
	Skipped              int64             `json:"skipped"`
	Created              *time.Time        `json:"created,omitempty"`
	Updated              *time.Time        `json:"updated,omitempty"`
}

func newScheduleView(info schedule.Info) scheduleView {
	s := info.Schedule
	v := scheduleView{
		Name: s.Name, Spec: s.Spec, TimeZone: s.TimeZone, Topic: s.Topic, Overlap: string(s.Overlap), CatchUp: string(s.CatchUp),
		CatchUpWindowSeconds: s.CatchUpWindow.Seconds(), JitterSeconds: s.Jitter.Seconds(), Metadata: s.Metadata,
		Version: info.Version, Paused: info.Paused, Pending: optionalTime(info.Pending), NextTicks: info.NextTicks,
		LastTick: optionalTime(info.LastTick), LastKey: info.LastKey, LastOutcome: string(info.LastOutcome),
		LastOutcomeAt: optionalTime(info.LastOutcomeAt), Buffered: optionalTime(info.Buffered),
		Published: info.Published, Skipped: info.Skipped, Created: optionalTime(info.Created), Updated: optionalTime(info.Updated),
	}
	if v.NextTicks == nil {
		v.NextTicks = []time.Time{}
	}
	if utf8.Valid(s.Payload) {
		v.Payload = string(s.Payload)
	} else {
		v.PayloadBase64 = s.Payload
	}
	return v
}

// zone is the schedule's time zone for a table: UTC when it names none.
func (v scheduleView) zone() string {
	if v.TimeZone == "" {
		return "UTC"
	}
	return v.TimeZone
}

// schedulePageView is one page of schedules; NextAfter is what --after takes for the next.
type schedulePageView struct {
	Schedules []scheduleView `json:"schedules"`
	NextAfter string         `json:"next_after,omitempty"`
}

func (a *app) schedulesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List, show, create and act on periodic schedules",
		Long: "List and show periodic schedules, and create, pause, resume, trigger, backfill and delete them.\n" +
			"The ticks are acted on by the Schedulers the application runs; these commands only read and\n" +
			"change the schedules in Redis.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(
		a.schedulesListCommand(), a.schedulesShowCommand(), a.schedulesPutCommand(),
		a.schedulesPauseCommand(true), a.schedulesPauseCommand(false), a.schedulesTriggerCommand(),
		a.schedulesBackfillCommand(), a.schedulesDeleteCommand(),
	)
	return cmd
}

func (a *app) schedulesListCommand() *cobra.Command {
	var after string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List one page of schedules in name order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			infos, more, err := schedule.List(cmd.Context(), a.in, after, limit)
			if err != nil {
				return err
			}
			v := schedulePageView{Schedules: make([]scheduleView, len(infos))}
			for n, info := range infos {
				v.Schedules[n] = newScheduleView(info)
			}
			if more && len(infos) > 0 {
				v.NextAfter = infos[len(infos)-1].Schedule.Name
			}
			return a.print(v, func(w *tabwriter.Writer) {
				row(w, "NAME", "SPEC", "TIME ZONE", "TOPIC", "PAUSED", "NEXT TICK", "LAST TICK", "LAST OUTCOME", "PUBLISHED", "SKIPPED")
				for _, s := range v.Schedules {
					row(w, s.Name, s.Spec, s.zone(), s.Topic, strconv.FormatBool(s.Paused), formatTime(deref(s.Pending)),
						formatTime(deref(s.LastTick)), orDash(s.LastOutcome), itoa(s.Published), itoa(s.Skipped))
				}
				if v.NextAfter != "" {
					fmt.Fprintf(w, "next page: --after %s\n", printable(v.NextAfter))
				}
			})
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "list the schedules after this name (the next page's --after that the previous page printed)")
	cmd.Flags().IntVar(&limit, "limit", 0, "most schedules on the page; 0 means the Inspector's default")
	return cmd
}

func (a *app) schedulesShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule: its definition, state, counts, next ticks and payload",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := schedule.Get(cmd.Context(), a.in, args[0])
			if err != nil {
				return err
			}
			v := newScheduleView(info)
			return a.print(v, func(w *tabwriter.Writer) {
				var loc *time.Location
				if v.TimeZone != "" {
					loc, _ = time.LoadLocation(v.TimeZone) // the library has loaded it already
				}
				for _, field := range [][2]string{
					{"name", v.Name}, {"spec", v.Spec}, {"time zone", v.zone()}, {"topic", v.Topic},
					{"overlap", v.Overlap}, {"catch-up", v.CatchUp}, {"catch-up window", info.Schedule.CatchUpWindow.String()},
					{"jitter", info.Schedule.Jitter.String()}, {"version", v.Version}, {"paused", strconv.FormatBool(v.Paused)},
					{"pending tick", zoned(info.Pending, loc)}, {"buffered tick", zoned(info.Buffered, loc)},
					{"last tick", zoned(info.LastTick, loc)}, {"last key", orDash(v.LastKey)},
					{"last outcome", orDash(v.LastOutcome)}, {"last outcome at", formatTime(info.LastOutcomeAt)},
					{"published", itoa(v.Published)}, {"skipped", itoa(v.Skipped)},
					{"created", formatTime(info.Created)}, {"updated", formatTime(info.Updated)},
				} {
					row(w, field[0]+":", field[1])
				}
				label := "next ticks:"
				for _, t := range v.NextTicks {
					row(w, label, zoned(t, loc))
					label = ""
				}
				if len(v.NextTicks) == 0 {
					row(w, label, "-")
				}
				label = "metadata:"
				for _, k := range slices.Sorted(maps.Keys(v.Metadata)) {
					row(w, label, printable(k)+"="+printable(v.Metadata[k]))
					label = ""
				}
				_ = w.Flush()
				a.printPayload(v.Payload, v.PayloadBase64, false)
			})
		},
	}
}

// zoned formats a tick time as formatTime does, followed by its wall time in loc when loc is
// not nil: the time the spec names.
func zoned(t time.Time, loc *time.Location) string {
	if t.IsZero() || loc == nil {
		return formatTime(t)
	}
	return formatTime(t) + " (" + t.In(loc).Format("2006-01-02 15:04:05 MST") + ")"
}

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

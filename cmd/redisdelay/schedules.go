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
	// Overdue marks a pending tick that no Scheduler acted on within a lease; OverdueReason says
	// why and what to do (schedule.Info.Overdue).
	Overdue       bool   `json:"overdue"`
	OverdueReason string `json:"overdue_reason,omitempty"`
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
		Overdue: info.Overdue, OverdueReason: info.OverdueReason,
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

// nextTick is the NEXT TICK cell of schedules list: the pending tick, followed by OVERDUE when
// no Scheduler acted on it within a lease.
func (v scheduleView) nextTick() string {
	if v.Overdue {
		return formatTime(deref(v.Pending)) + " " + overdueMark
	}
	return formatTime(deref(v.Pending))
}

// overdueField is the overdue field of schedules show: "no", or "yes: " and the reason.
func (v scheduleView) overdueField() string {
	if !v.Overdue {
		return "no"
	}
	return "yes: " + v.OverdueReason
}

// overdueMark follows the next tick of an overdue schedule in a table.
const overdueMark = "OVERDUE"

// printOverdue prints, below the table of schedules list, each reason of the overdue ticks
// once, with the schedules it applies to.
func (a *app) printOverdue(schedules []scheduleView) {
	var reasons []string
	names := map[string][]string{}
	for _, s := range schedules {
		if !s.Overdue {
			continue
		}
		if _, ok := names[s.OverdueReason]; !ok {
			reasons = append(reasons, s.OverdueReason)
		}
		names[s.OverdueReason] = append(names[s.OverdueReason], printable(s.Name))
	}
	for _, r := range reasons {
		fmt.Fprintf(a.stdout, "%s (%s): %s\n", overdueMark, strings.Join(names[r], ", "), printable(r))
	}
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
					row(w, s.Name, s.Spec, s.zone(), s.Topic, strconv.FormatBool(s.Paused), s.nextTick(),
						formatTime(deref(s.LastTick)), orDash(s.LastOutcome), itoa(s.Published), itoa(s.Skipped))
				}
				if v.NextAfter != "" {
					fmt.Fprintf(w, "next page: --after %s\n", printable(v.NextAfter))
				}
				_ = w.Flush()
				a.printOverdue(v.Schedules)
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
					{"pending tick", zoned(info.Pending, loc)}, {"overdue", v.overdueField()}, {"buffered tick", zoned(info.Buffered, loc)},
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

package main

// The workers command: one page of the running Subscribers and Schedulers, from the heartbeat
// records they keep in Redis (Inspector.Workers).

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
)

// subscriptionView is a topic and consumer group that a worker consumes.
type subscriptionView struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
}

// workerView is a redisdelay.WorkerInfo: Started on the worker's clock, LastBeat and Expires
// on the Redis clock.
type workerView struct {
	ID            string             `json:"id"`
	Kind          string             `json:"kind"`
	Consumer      string             `json:"consumer,omitempty"`
	Host          string             `json:"host"`
	PID           int                `json:"pid"`
	Started       time.Time          `json:"started"`
	LastBeat      time.Time          `json:"last_beat"`
	Expires       time.Time          `json:"expires"`
	Subscriptions []subscriptionView `json:"subscriptions"`
	// SubscriptionsOmitted counts the subscriptions beyond the record's limit
	// (redisdelay.MaxWorkerSubscriptions).
	SubscriptionsOmitted int     `json:"subscriptions_omitted,omitempty"`
	InFlight             int     `json:"in_flight"`
	LeaseTimeoutSeconds  float64 `json:"lease_timeout_seconds"`
}

// workersPageView is one page of workers; NextCursor is what --cursor takes for the next.
type workersPageView struct {
	Workers    []workerView `json:"workers"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

func newWorkerView(w redisdelay.WorkerInfo) workerView {
	v := workerView{
		ID: w.ID, Kind: string(w.Kind), Consumer: w.Consumer, Host: w.Host, PID: w.PID, Started: w.Started,
		LastBeat: w.LastBeat, Expires: w.Expires, Subscriptions: make([]subscriptionView, len(w.Subscriptions)),
		SubscriptionsOmitted: w.SubscriptionsOmitted, InFlight: w.InFlight, LeaseTimeoutSeconds: w.LeaseTimeout.Seconds(),
	}
	for n, s := range w.Subscriptions {
		v.Subscriptions[n] = subscriptionView{Topic: s.Topic, Group: s.Group}
	}
	return v
}

func (a *app) workersCommand() *cobra.Command {
	var (
		cursor, kind string
		limit        int
	)
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List one page of the running Subscribers and Schedulers",
		Long: "List one page of the running Subscribers and Schedulers (Schedulers first), from the heartbeat\n" +
			"record each refreshes in Redis: kind, host, process ID, consumer, how long ago it started and\n" +
			"last refreshed its record (on this machine's clock), the topics/consumer groups it consumes and\n" +
			"the messages it holds in flight. A process that died without Close is listed until its record\n" +
			"expires, three heartbeat intervals (SubscriberConfig.WorkerHeartbeat) after its last refresh.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			page, err := a.in.Workers(cmd.Context(), redisdelay.WorkersOptions{
				Limit: limit, Cursor: cursor, Kind: redisdelay.WorkerKind(kind),
			})
			if err != nil {
				return err
			}
			v := workersPageView{Workers: make([]workerView, len(page.Workers)), NextCursor: page.NextCursor}
			for n, w := range page.Workers {
				v.Workers[n] = newWorkerView(w)
			}
			return a.print(v, func(w *tabwriter.Writer) { a.workersTable(w, v) })
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "most workers on the page; 0 means the Inspector's default")
	cmd.Flags().StringVar(&cursor, "cursor", "", "the next cursor the previous page printed")
	cmd.Flags().StringVar(&kind, "kind", "", "subscriber or scheduler: list only that kind (default both)")
	return cmd
}

// workersTable writes the table of workers: ages on this machine's clock.
func (a *app) workersTable(w *tabwriter.Writer, v workersPageView) {
	row(w, "KIND", "HOST", "PID", "CONSUMER", "STARTED", "LAST BEAT", "SUBSCRIPTIONS", "IN FLIGHT")
	now := time.Now()
	for _, wv := range v.Workers {
		subs := make([]string, len(wv.Subscriptions))
		for n, s := range wv.Subscriptions {
			subs[n] = printable(s.Topic) + "/" + printable(s.Group)
		}
		if wv.SubscriptionsOmitted > 0 {
			subs = append(subs, fmt.Sprintf("+%d more", wv.SubscriptionsOmitted))
		}
		row(w, wv.Kind, wv.Host, strconv.Itoa(wv.PID), orDash(wv.Consumer), age(now, wv.Started), age(now, wv.LastBeat),
			orDash(strings.Join(subs, ",")), strconv.Itoa(wv.InFlight))
	}
	if v.NextCursor != "" {
		fmt.Fprintf(w, "next page: --cursor %s\n", printable(v.NextCursor))
	}
	if len(v.Workers) == 0 && v.NextCursor == "" {
		fmt.Fprintf(a.stderr, "No running Subscriber or Scheduler under the key prefix %s on this Redis.\n", printable(a.prefix))
	}
}

// age formats how long before now t was, to the second, "3m12s ago"; "-" for a zero t.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return max(now.Sub(t), 0).Round(time.Second).String() + " ago"
}

// Command redisdelay inspects and operates the queues of the redisdelay Watermill Pub/Sub
// through a redisdelay.Inspector: it shows topics, consumer groups, statistics, messages and
// where every consumer group stands with a key, and cancels, reschedules, runs, requeues and purges messages, pauses and resumes groups and
// deletes them; it lists and shows periodic schedules and creates, pauses, resumes, triggers,
// backfills and deletes them.
//
//	redisdelay stats --watch
//	redisdelay list --topic orders --state due
//	redisdelay run-now --topic orders --key order-42
//
// A command that takes --group and is not given it uses the topic's only consumer group; a
// topic with none or several is an error that lists them (remove-group always needs --group).
//
// Tables go to stdout, or one JSON document per invocation with --output json. A value that a
// table would print with control characters or invalid UTF-8 (which a terminal could take for
// commands: clear the screen, set the clipboard) is printed quoted in Go syntax instead, as
// strconv.Quote does; JSON output holds every value exactly. Prompts go to stderr. An error is
// printed to stderr as one line, "redisdelay: <error>", or with --output json to stdout as one
// JSON document, {"error": "<error>", "kind": "<kind>"} (see errorKind), and the command exits
// with code 1; so does a destructive command whose confirmation is refused.
//
// The Redis address is --addr, else $REDIS_ADDR, else $REDIS_URL, else 127.0.0.1:6379. Before
// a command runs, the Redis it names must answer a PING within --timeout, and each Redis call
// of a command is bounded by --timeout. SIGINT or SIGTERM stops every command: it cancels the
// command's calls and computations (a backfill's tick search is checked between ticks), and a
// command that has not returned 5 s later (one waiting at a prompt) ends with exit code 130; a
// second signal ends it at once.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// defaultAddr is the Redis address when neither --addr nor REDIS_ADDR nor REDIS_URL gives one.
const defaultAddr = "127.0.0.1:6379"

func main() {
	// go-redis logs every failed dial on its own; the error a command returns says it once.
	redis.SetLogger(silentLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{stdin: bufio.NewReader(os.Stdin), stdout: os.Stdout, stderr: os.Stderr}
	done := make(chan struct{})
	go exitIfStuck(ctx, stop, done)
	err := a.rootCommand().ExecuteContext(ctx)
	close(done)
	a.close()
	stop()
	if err != nil {
		a.printError(err)
		os.Exit(1)
	}
}

// stopGrace is how long a command may take to stop after SIGINT or SIGTERM cancelled its
// context before the process ends anyway.
const stopGrace = 5 * time.Second

// exitIfStuck ends the process with exit code 130 when the command has not returned (done)
// within stopGrace after SIGINT or SIGTERM, whatever it waits for (a prompt reading stdin, a
// computation): every command stops on a signal. After the first signal, a second one ends the
// process at once (stop restores the default handling).
func exitIfStuck(ctx context.Context, stop context.CancelFunc, done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	stop()
	select {
	case <-done:
	case <-time.After(stopGrace):
		fmt.Fprintf(os.Stderr, "redisdelay: interrupted; the command did not stop within %s\n", stopGrace)
		os.Exit(130)
	}
}

// silentLogger drops go-redis's log lines.
type silentLogger struct{}

func (silentLogger) Printf(context.Context, string, ...any) {}

// errUnreachable is wrapped by the error of a command whose Redis does not answer.
var errUnreachable = errors.New("cannot reach Redis")

// errorView is an error as --output json prints it.
type errorView struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

// errorKind names the kind of err for --output json: "not-found" (a topic, group, message or
// key that does not exist), "unreachable" (Redis did not answer), "not-confirmed" (a
// destructive command's question was not answered yes), or "error".
func errorKind(err error) string {
	switch {
	case errors.Is(err, redisdelay.ErrNotFound):
		return "not-found"
	case errors.Is(err, errUnreachable):
		return "unreachable"
	case errors.Is(err, errNotConfirmed):
		return "not-confirmed"
	}
	return "error"
}

// printError prints err as one line on stderr, or as one JSON document on stdout with --output
// json.
func (a *app) printError(err error) {
	// The library's errors start with the same prefix already.
	msg := strings.TrimPrefix(err.Error(), "redisdelay: ")
	if a.output == "json" {
		_ = json.NewEncoder(a.stdout).Encode(errorView{Error: msg, Kind: errorKind(err)})
		return
	}
	fmt.Fprintln(a.stderr, "redisdelay:", msg)
}

// app is what the commands share: the root command's flags, and the Redis client and Inspector
// built from them before a command runs.
type app struct {
	stdin  *bufio.Reader
	stdout io.Writer
	stderr io.Writer

	addr       string
	cluster    []string
	username   string
	password   string
	tls        bool
	prefix     string
	partitions int
	timeout    time.Duration
	output     string
	yes        bool

	client redis.UniversalClient
	in     *redisdelay.Inspector
	sched  *schedule.Scheduler // made on first use by the schedules commands that change one
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "redisdelay",
		Short:         "Inspect and operate redisdelay queues",
		SilenceErrors: true, // main prints them
		SilenceUsage:  true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return a.connect()
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&a.addr, "addr", "", "Redis address host:port, or a redis:// or rediss:// URL (default $REDIS_ADDR, else $REDIS_URL, else "+defaultAddr+")")
	f.StringSliceVar(&a.cluster, "cluster", nil, "comma-separated Redis Cluster addresses; replaces --addr")
	f.StringVar(&a.username, "username", "", "Redis ACL user name")
	f.StringVar(&a.password, "password", "", "Redis password")
	f.BoolVar(&a.tls, "tls", false, "connect with TLS 1.2 or later")
	f.StringVar(&a.prefix, "prefix", redisdelay.DefaultKeyPrefix, "key prefix of the queues' publishers and subscribers")
	f.IntVar(&a.partitions, "partitions", 1, "partitions of the topics missing from the topic registry, and of the Scheduler's publisher")
	f.DurationVar(&a.timeout, "timeout", redisdelay.DefaultOperationTimeout, "bound on each Inspector operation")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.BoolVarP(&a.yes, "yes", "y", false, "do not ask for confirmation (cancel, requeue, purge, remove-group, schedules backfill and schedules delete ask)")
	root.MarkFlagsMutuallyExclusive("addr", "cluster")
	root.AddCommand(
		a.topicsCommand(), a.statsCommand(), a.listCommand(), a.showCommand(), a.statusCommand(),
		a.cancelCommand(), a.rescheduleCommand(), a.runCommand(), a.requeueCommand(),
		a.purgeCommand(), a.pauseCommand(true), a.pauseCommand(false), a.deleteGroupCommand(),
		a.workersCommand(), a.schedulesCommand(), a.dashboardCommand(),
	)
	return root
}

// connect builds the Redis client and the Inspector from the flags, and checks that Redis
// answers a PING within --timeout: a wrong address is one error, errUnreachable, that names it.
func (a *app) connect() error {
	if a.output != "table" && a.output != "json" {
		return fmt.Errorf("--output is %q, want table or json", a.output)
	}
	client, where, err := a.newClient()
	if err != nil {
		return err
	}
	a.client = client
	a.in, err = redisdelay.NewInspector(redisdelay.InspectorConfig{
		Client: a.client, KeyPrefix: a.prefix, Partitions: a.partitions, OperationTimeout: a.timeout,
	}, nil)
	if err != nil {
		return err
	}
	return a.ping(where)
}

// newClient returns the client of the Redis that --cluster, or else the address (see address),
// names, with --username, --password and --tls, and where: that Redis and where its address
// came from, for errUnreachable. A try of a command dials once (go-redis would dial five
// times, 100 ms apart, and wait after the last); go-redis's retries of the command itself
// stay. Every call ends by its context's deadline, --timeout (go-redis would wait for its
// ReadTimeout, 3 s, otherwise). A URL that does not parse is an error naming where it came
// from.
func (a *app) newClient() (client redis.UniversalClient, where string, err error) {
	var tlsConfig *tls.Config
	if a.tls {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if len(a.cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: a.cluster, Username: a.username, Password: a.password, TLSConfig: tlsConfig,
			DialerRetries: 1, DialerRetryTimeout: time.Millisecond, ContextTimeoutEnabled: true,
		}), strings.Join(a.cluster, ",") + " (--cluster)", nil
	}
	addr, from := a.address()
	opts := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		if opts, err = redis.ParseURL(addr); err != nil {
			return nil, "", fmt.Errorf("%s: %w", from, err)
		}
	}
	opts.DialerRetries, opts.DialerRetryTimeout, opts.ContextTimeoutEnabled = 1, time.Millisecond, true
	// Flags given explicitly win over the URL's.
	if a.username != "" {
		opts.Username = a.username
	}
	if a.password != "" {
		opts.Password = a.password
	}
	if opts.TLSConfig == nil {
		opts.TLSConfig = tlsConfig
	}
	return redis.NewClient(opts), fmt.Sprintf("%s (%s)", opts.Addr, from), nil
}

// ping checks that Redis answers a PING within --timeout; its error wraps errUnreachable and
// names where (the Redis and where its address came from).
func (a *app) ping(where string) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := a.client.Ping(ctx).Err(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w at %s: no answer within %s (--timeout)", errUnreachable, where, a.timeout)
		}
		return fmt.Errorf("%w at %s: %w", errUnreachable, where, err)
	}
	return nil
}

// address returns the Redis address or URL to use and where it came from: --addr, else
// REDIS_ADDR, else REDIS_URL (what this command read before the examples and it agreed on
// REDIS_ADDR), else defaultAddr.
func (a *app) address() (addr, from string) {
	switch {
	case a.addr != "":
		return a.addr, "--addr"
	case os.Getenv("REDIS_ADDR") != "":
		return os.Getenv("REDIS_ADDR"), "$REDIS_ADDR"
	case os.Getenv("REDIS_URL") != "":
		return os.Getenv("REDIS_URL"), "$REDIS_URL"
	}
	return defaultAddr, "the default address"
}

// scheduler returns the Scheduler of the schedules commands that change a schedule, made on
// first use with the root flags' client, key prefix, partitions and timeout. It is never run:
// its calls work without Run.
func (a *app) scheduler() (*schedule.Scheduler, error) {
	if a.sched != nil {
		return a.sched, nil
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: a.client, KeyPrefix: a.prefix, Partitions: a.partitions, OperationTimeout: a.timeout,
	}, nil)
	if err != nil {
		return nil, err
	}
	sch, err := schedule.New(schedule.Config{Publisher: pub}, nil)
	if err != nil {
		return nil, err
	}
	a.sched = sch
	return sch, nil
}

func (a *app) close() {
	if a.sched != nil {
		_ = a.sched.Close() // its Publisher holds nothing to close: Close only refuses later calls
	}
	if a.client != nil {
		_ = a.client.Close()
	}
}

// print writes v as one JSON document with --output json; otherwise table writes v's rows,
// cells separated by tabs, to a tabwriter that print flushes.
func (a *app) print(v any, table func(w *tabwriter.Writer)) error {
	if a.output == "json" {
		return json.NewEncoder(a.stdout).Encode(v)
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// row writes one table row, each cell made printable (see printable).
func row(w io.Writer, cells ...string) {
	for n, c := range cells {
		cells[n] = printable(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// printable returns s as it is when it is valid UTF-8 of printable characters and spaces only,
// else quoted in Go syntax (strconv.Quote): so that a hostile name, key, metadata value or
// payload can neither send a terminal escape sequence nor break the table's columns.
func printable(s string) string {
	if isPrintable(s, "") {
		return s
	}
	return strconv.Quote(s)
}

// isPrintable reports whether s is valid UTF-8 of characters that strconv.IsPrint accepts (no
// control or format characters) or that are in extra.
func isPrintable(s, extra string) bool {
	for _, r := range s {
		if !strconv.IsPrint(r) && !strings.ContainsRune(extra, r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

// errNotConfirmed is returned when a destructive command's question is answered with anything
// but yes: nothing was changed, and the command exits with code 1.
var errNotConfirmed = errors.New("not confirmed; nothing was changed")

// confirm asks question on stderr and reads the answer from stdin, unless --yes is set. Only
// "y" or "yes" confirms; anything else, end of input included, is errNotConfirmed.
func (a *app) confirm(question string) error {
	if a.yes {
		return nil
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	answer, _ := a.stdin.ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errNotConfirmed
}

// formatTime formats a Redis-clock time for a table: RFC 3339 in UTC to the millisecond, or "-"
// when it is zero (does not apply).
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// optionalTime returns &t, or nil when t is zero (does not apply), for a view's field that JSON
// leaves out then. (The omitzero tag would do it from Go 1.24 on; this command builds with 1.23.)
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// deref returns *t, or the zero time when t is nil.
func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// Command redisdelay inspects and operates the queues of the redisdelay Watermill Pub/Sub
// through a redisdelay.Inspector: it shows topics, consumer groups, statistics and messages,
// and cancels, reschedules, runs, requeues and purges messages, pauses and resumes groups and
// deletes them.
//
//	redisdelay stats --watch
//	redisdelay list --topic orders --state due
//	redisdelay run --topic orders --key order-42
//
// Tables go to stdout, or one JSON document per invocation with --output json. A value that a
// table would print with control characters or invalid UTF-8 (which a terminal could take for
// commands: clear the screen, set the clipboard) is printed quoted in Go syntax instead, as
// strconv.Quote does; JSON output holds every value exactly. Prompts go to stderr. An error is printed to stderr as "redisdelay: <error>" and exits with code 1; so does
// a destructive command whose confirmation is refused.
package main

import (
	"bufio"
	"cmp"
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
)

// defaultAddr is the Redis address when neither --addr nor REDIS_URL gives one.
const defaultAddr = "127.0.0.1:6379"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{stdin: bufio.NewReader(os.Stdin), stdout: os.Stdout, stderr: os.Stderr}
	err := a.rootCommand().ExecuteContext(ctx)
	a.close()
	stop()
	if err != nil {
		// The library's errors start with the same prefix already.
		fmt.Fprintln(os.Stderr, "redisdelay:", strings.TrimPrefix(err.Error(), "redisdelay: "))
		os.Exit(1)
	}
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

	client redis.UniversalClient
	in     *redisdelay.Inspector
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
	f.StringVar(&a.addr, "addr", "", "Redis address host:port, or a redis:// or rediss:// URL (default $REDIS_URL, else "+defaultAddr+")")
	f.StringSliceVar(&a.cluster, "cluster", nil, "comma-separated Redis Cluster addresses; replaces --addr")
	f.StringVar(&a.username, "username", "", "Redis ACL user name")
	f.StringVar(&a.password, "password", "", "Redis password")
	f.BoolVar(&a.tls, "tls", false, "connect with TLS 1.2 or later")
	f.StringVar(&a.prefix, "prefix", redisdelay.DefaultKeyPrefix, "key prefix of the queues' publishers and subscribers")
	f.IntVar(&a.partitions, "partitions", 1, "partitions of the topics, as their publishers were configured")
	f.DurationVar(&a.timeout, "timeout", redisdelay.DefaultOperationTimeout, "bound on each Inspector operation")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.MarkFlagsMutuallyExclusive("addr", "cluster")
	root.AddCommand(
		a.topicsCommand(), a.statsCommand(), a.listCommand(), a.showCommand(),
		a.cancelCommand(), a.rescheduleCommand(), a.runCommand(), a.requeueCommand(),
		a.purgeCommand(), a.pauseCommand(true), a.pauseCommand(false), a.deleteGroupCommand(),
		a.dashboardCommand(),
	)
	return root
}

// connect builds the Redis client and the Inspector from the flags. Neither talks to Redis yet.
func (a *app) connect() error {
	if a.output != "table" && a.output != "json" {
		return fmt.Errorf("--output is %q, want table or json", a.output)
	}
	var tlsConfig *tls.Config
	if a.tls {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if len(a.cluster) > 0 {
		a.client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: a.cluster, Username: a.username, Password: a.password, TLSConfig: tlsConfig,
		})
	} else {
		addr := cmp.Or(a.addr, os.Getenv("REDIS_URL"), defaultAddr)
		opts := &redis.Options{Addr: addr}
		if strings.Contains(addr, "://") {
			var err error
			if opts, err = redis.ParseURL(addr); err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
		}
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
		a.client = redis.NewClient(opts)
	}
	var err error
	a.in, err = redisdelay.NewInspector(redisdelay.InspectorConfig{
		Client: a.client, KeyPrefix: a.prefix, Partitions: a.partitions, OperationTimeout: a.timeout,
	}, nil)
	return err
}

func (a *app) close() {
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

// confirm asks question on stderr and reads the answer from stdin, unless yes is set (--yes).
// Only "y" or "yes" confirms; anything else, end of input included, is errNotConfirmed.
func (a *app) confirm(yes bool, question string) error {
	if yes {
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

// addGroupFlags adds the required --topic and --group, which defaults to the library's default
// consumer group.
func addGroupFlags(cmd *cobra.Command, topic, group *string) {
	cmd.Flags().StringVar(topic, "topic", "", "topic (required)")
	cmd.Flags().StringVar(group, "group", redisdelay.DefaultConsumerGroup, "consumer group")
	_ = cmd.MarkFlagRequired("topic")
}

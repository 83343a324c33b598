package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// binary is the redisdelay command, built once by TestMain.
var binary string

// runTimeout bounds each run of the command, so that a hung one fails its test.
const runTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	runWorkerChild() // in a worker process of a test, it runs until killed
	dir, err := os.MkdirTemp("", "redisdelay-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "redisdelay")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	redistest.ReportSkips()
	os.Exit(code)
}

// queue is a throw-away redis-server with the library's Publisher and Inspector on it, and the
// command pointed at it.
type queue struct {
	t      *testing.T
	addr   string
	client *redis.Client
	pub    *redisdelay.Publisher
	in     *redisdelay.Inspector
}

func newQueue(t *testing.T) *queue {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	require.NoError(t, err)
	return &queue{t: t, addr: srv.Addr, client: client, pub: pub, in: in}
}

// subscriber returns a Subscriber of group, closed when the test ends.
func (q *queue) subscriber(config redisdelay.SubscriberConfig) *redisdelay.Subscriber {
	config.Client = q.client
	sub, err := redisdelay.NewSubscriber(config, nil)
	require.NoError(q.t, err)
	q.t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// register registers consumer groups on topic, as their subscribers' start would.
func (q *queue) register(topic string, groups ...string) {
	for _, g := range groups {
		require.NoError(q.t, q.subscriber(redisdelay.SubscriberConfig{ConsumerGroup: g}).SubscribeInitialize(topic))
	}
}

// newMessage returns a message with payload, and key unless it is empty.
func newMessage(key, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	if key != "" {
		redisdelay.WithKey(msg, key)
	}
	return msg
}

// schedule publishes messages on topic due in an hour, and returns their UUIDs.
func (q *queue) schedule(topic string, msgs ...*message.Message) []string {
	uuids := make([]string, len(msgs))
	for n, msg := range msgs {
		delay.Message(msg, delay.For(time.Hour))
		uuids[n] = msg.UUID
	}
	require.NoError(q.t, q.pub.Publish(topic, msgs...))
	return uuids
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the command against the queue's Redis, with stdin as its input.
func (q *queue) run(stdin string, args ...string) result {
	q.t.Helper()
	return runCommand(q.t, nil, stdin, append([]string{"--addr", q.addr}, args...)...)
}

// runCommand runs the command with args, the environment variables env (KEY=value) added to
// the test's with REDIS_ADDR and REDIS_URL unset, and stdin as its input.
func runCommand(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_ADDR=") && !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// ok runs the command, requires it to succeed and returns its output.
func (q *queue) ok(args ...string) string {
	q.t.Helper()
	r := q.run("", args...)
	require.Equalf(q.t, 0, r.code, "redisdelay %s: %s", strings.Join(args, " "), r.stderr)
	return r.stdout
}

// json runs the command with --output json and decodes its output, one JSON document, into v.
func (q *queue) json(v any, args ...string) {
	q.t.Helper()
	out := q.ok(append([]string{"--output", "json"}, args...)...)
	dec := json.NewDecoder(strings.NewReader(out))
	require.NoError(q.t, dec.Decode(v), out)
	require.False(q.t, dec.More(), "more than one JSON document: %s", out)
}

// stats returns what the stats command prints for group on topic.
func (q *queue) stats(topic, group string) statsView {
	q.t.Helper()
	var stats []statsView
	q.json(&stats, "stats", "--topic", topic)
	for _, s := range stats {
		if s.Group == group {
			return s
		}
	}
	q.t.Fatalf("stats show no group %q on topic %q: %+v", group, topic, stats)
	return statsView{}
}

// status returns the library's view of the message with key on topic in group.
func (q *queue) status(topic, key, group string) redisdelay.KeyGroupStatus {
	q.t.Helper()
	st, err := q.in.Status(context.Background(), topic, redisdelay.ByKey(key))
	require.NoError(q.t, err)
	return st.Groups[group]
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	port, err := redistest.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func TestAnUnreachableRedisIsOneErrorLineThatNamesTheAddress(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, tc := range []struct {
		env  []string
		args []string
		from string
	}{
		{nil, []string{"--addr", addr}, "--addr"},
		{[]string{"REDIS_ADDR=" + addr}, nil, "$REDIS_ADDR"},
		{[]string{"REDIS_URL=redis://" + addr}, nil, "$REDIS_URL"},
		{[]string{"REDIS_ADDR=" + addr, "REDIS_URL=redis://" + closedAddr(t)}, nil, "$REDIS_ADDR"},
	} {
		start := time.Now()
		r := runCommand(t, tc.env, "", append(tc.args, "--timeout", "2s", "topics")...)
		elapsed := time.Since(start)
		assert.Equal(t, 1, r.code)
		assert.Empty(t, r.stdout)
		assert.Regexp(t, `^redisdelay: cannot reach Redis at `+regexp.QuoteMeta(addr+" ("+tc.from+")")+`: dial tcp [^\n]*: connection refused\n$`, r.stderr, "one line, without go-redis's own log lines")
		assert.Less(t, elapsed, 2*time.Second, "within --timeout")
	}
}

func TestARedisThatDoesNotAnswerIsReportedWithinTheTimeout(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers, as a frozen Redis would.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()

	start := time.Now()
	r := runCommand(t, nil, "", "--addr", l.Addr().String(), "--timeout", "500ms", "stats")
	elapsed := time.Since(start)
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "redisdelay: cannot reach Redis at "+l.Addr().String()+" (--addr): no answer within 500ms (--timeout)\n", r.stderr)
	assert.Less(t, elapsed, 500*time.Millisecond+time.Second, "the timeout and a process start")
}

func TestJSONOutputPrintsErrorsAsOneDocumentWithTheirKind(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"))

	for _, tc := range []struct {
		args   []string
		stdin  string
		kind   string
		prefix string
	}{
		{[]string{"--addr", q.addr, "stats", "--topic", "nowhere"}, "", "not-found", `topic "nowhere": not found`},
		{[]string{"--addr", q.addr, "cancel", "--topic", topic, "--key", "nope", "--yes"}, "", "not-found", `key "nope" on topic "orders": not found`},
		{[]string{"--addr", q.addr, "cancel", "--topic", topic, "--key", "order-1"}, "n\n", "not-confirmed", "not confirmed; nothing was changed"},
		{[]string{"--addr", closedAddr(t), "topics"}, "", "unreachable", "cannot reach Redis at "},
		{[]string{"--addr", q.addr, "reschedule", "--topic", topic, "--key", "order-1", "--at", "tomorrow"}, "", "error", "--at: "},
	} {
		r := runCommand(t, nil, tc.stdin, append([]string{"--output", "json"}, tc.args...)...)
		assert.Equal(t, 1, r.code, tc.args)
		var e errorView
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		require.NoError(t, dec.Decode(&e), "stdout %q", r.stdout)
		assert.False(t, dec.More(), "one JSON document: %q", r.stdout)
		assert.Equal(t, tc.kind, e.Kind, tc.args)
		assert.True(t, strings.HasPrefix(e.Error, tc.prefix), "error %q, want prefix %q", e.Error, tc.prefix)
		assert.NotContains(t, r.stderr, "redisdelay:", "the error is printed once, as JSON")
	}
	assert.Equal(t, redisdelay.StateScheduled, q.status(topic, "order-1", group).State, "nothing was confirmed")
}

func TestYesIsAcceptedByEveryCommand(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.schedule(topic, newMessage("order-1", "a"))

	for n, args := range [][]string{
		{"topics"}, {"stats"}, {"list", "--topic", topic, "--state", "scheduled"},
		{"show", "--topic", topic, "--key", "order-1"},
		{"reschedule", "--topic", topic, "--key", "order-1", "--in", "1h"},
		{"run-now", "--topic", topic, "--key", "order-1"},
		{"pause", "--topic", topic}, {"resume", "--topic", topic},
		{"cancel", "--topic", topic, "--key", "order-1"},
	} {
		yes := []string{"--yes", "-y"}[n%2]
		r := q.run("", append(args, yes)...)
		assert.Equal(t, 0, r.code, "%v %s: %s", args, yes, r.stderr)
		assert.NotContains(t, r.stderr, "[y/N]", "%v %s asks nothing", args, yes)
	}
	assert.Equal(t, redisdelay.StateNotFound, q.status(topic, "order-1", group).State, "cancel --yes cancelled without asking")
}

func TestTopicsAndStatsSayWhereTheyLookedWhenThereIsNoTopic(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)

	for _, args := range [][]string{{"topics"}, {"stats"}} {
		r := q.run("", append([]string{"--prefix", "elsewhere:"}, args...)...)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "No topics under the key prefix elsewhere: on this Redis; for queues written with another KeyPrefix, pass it as --prefix.\n", r.stderr)
		assert.Empty(t, q.run("", args...).stderr, "no hint when there are topics")
	}
}

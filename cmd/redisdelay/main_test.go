package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// binary is the redisdelay command, built once by TestMain.
var binary string

// runTimeout bounds each run of the command, so that a hung one fails its test.
const runTimeout = 30 * time.Second

func TestMain(m *testing.M) {
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
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"--addr", q.addr}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(q.t, err)
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
	st, err := q.in.Status(context.Background(), topic, key)
	require.NoError(q.t, err)
	return st.Groups[group]
}

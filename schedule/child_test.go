package schedule_test

// The Scheduler processes of the kill tests: the test binary run as one Scheduler instance
// (runSchedulerChild), and the parent's side that starts, reads and SIGKILLs them.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// schedulerChildEnv makes the test binary act as one Scheduler instance that the kill tests
// SIGKILL: "<redis|cluster> <addresses, comma-separated> <key prefix> <lease in ms>".
const schedulerChildEnv = "REDISDELAY_SCHEDULER_CHILD"

// runSchedulerChild is called by TestMain. In the child process it runs a Scheduler until it
// is killed, prints "ready" once it runs and "delivered <attempt>" as each tick message is
// handed to it; elsewhere it does nothing.
func runSchedulerChild() {
	spec := os.Getenv(schedulerChildEnv)
	if spec == "" {
		return
	}
	f := strings.Fields(spec)
	var client redis.UniversalClient
	if f[0] == "cluster" {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(f[1], ",")})
	} else {
		client = redis.NewClient(&redis.Options{Addr: f[1]})
	}
	leaseMs, err := strconv.Atoi(f[3])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: f[2]}, deliveryReporter{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	cfg := schedule.Config{Publisher: pub, LeaseTimeout: time.Duration(leaseMs) * time.Millisecond}
	s, err := schedule.New(cfg, deliveryReporter{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	if err := s.Run(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// deliveryReporter is a child's logger: errors as errorLogger logs them, and a line "delivered
// <attempt>" on stdout as the child's subscription hands it a tick message, which tells the
// parent which child acts on a tick and when.
type deliveryReporter struct{ errorLogger }

func (r deliveryReporter) Trace(msg string, fields watermill.LogFields) {
	if msg == "Message delivered" {
		fmt.Printf("delivered %v\n", fields["attempt"])
	}
}

func (r deliveryReporter) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return deliveryReporter{errorLogger{fields: r.fields.Add(fields)}}
}

// childReport is a child's "delivered" line: child proc, in its start gen, was handed a tick
// message's attempt at time at (the parent's clock, as it read the line).
type childReport struct {
	proc, gen, attempt int
	at                 time.Time
}

// schedulerProcs are Scheduler child processes, killed and restarted by a kill test; all are
// killed when the test ends.
type schedulerProcs struct {
	t       *testing.T
	env     string           // schedulerChildEnv's value
	reports chan childReport // their "delivered" lines; nil discards them
	cmds    []*exec.Cmd
	gens    []int
}

// startSchedulerProcs starts n children on b's Redis with key prefix and lease.
func startSchedulerProcs(t *testing.T, b backend, prefix string, lease time.Duration, n int, reports chan childReport) *schedulerProcs {
	kind, addrs := "redis", ""
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		kind, addrs = "cluster", strings.Join(c.Options().Addrs, ",")
	case *redis.Client:
		addrs = c.Options().Addr
	}
	env := fmt.Sprintf("%s %s %s %d", kind, addrs, prefix, lease.Milliseconds())
	p := &schedulerProcs{t: t, env: env, reports: reports, cmds: make([]*exec.Cmd, n), gens: make([]int, n)}
	t.Cleanup(func() {
		for i := range p.cmds {
			p.kill(i)
		}
	})
	for i := range p.cmds {
		p.start(i)
	}
	return p
}

// start starts child i and waits until its Scheduler runs.
func (p *schedulerProcs) start(i int) {
	t := p.t
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), schedulerChildEnv+"="+p.env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "instance %d did not start: %v", i, lines.Err())
	require.Equal(t, "ready", lines.Text())
	p.gens[i]++
	gen, reports := p.gens[i], p.reports
	go func() {
		for lines.Scan() {
			var attempt int
			if _, err := fmt.Sscanf(lines.Text(), "delivered %d", &attempt); err == nil && reports != nil {
				select {
				case reports <- childReport{proc: i, gen: gen, attempt: attempt, at: time.Now()}:
				default: // the test stopped reading
				}
			}
		}
	}()
	p.cmds[i] = cmd
}

// kill SIGKILLs child i, if it runs.
func (p *schedulerProcs) kill(i int) {
	if p.cmds[i] != nil {
		_ = p.cmds[i].Process.Signal(syscall.SIGKILL)
		_ = p.cmds[i].Wait()
		p.cmds[i] = nil
	}
}

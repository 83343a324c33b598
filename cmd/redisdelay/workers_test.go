package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// workerChildEnv makes the test binary (TestMain) a worker process instead of running tests:
// its value is the Redis address. The child subscribes group billing to topic orders and runs
// a Scheduler, both with a heartbeat every workerBeat, prints "ready" and blocks until killed.
const workerChildEnv = "REDISDELAY_CLI_WORKER_CHILD"

// workerBeat is the child's heartbeat interval: its records expire 3 intervals after the last.
const workerBeat = 500 * time.Millisecond

// runWorkerChild is called first by TestMain: in a child process (workerChildEnv set) it runs
// the workers and never returns; elsewhere it does nothing.
func runWorkerChild() {
	addr := os.Getenv(workerChildEnv)
	if addr == "" {
		return
	}
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client: client, ConsumerGroup: "billing", WorkerHeartbeat: workerBeat,
	}, nil)
	if err != nil {
		fail(err)
	}
	if _, err := sub.Subscribe(context.Background(), topic); err != nil {
		fail(err)
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		fail(err)
	}
	sch, err := schedule.New(schedule.Config{Publisher: pub, WorkerHeartbeat: workerBeat}, nil)
	if err != nil {
		fail(err)
	}
	go func() { fail(sch.Run(context.Background())) }()
	fmt.Println("ready")
	select {}
}

// workers returns what workers -o json lists.
func (q *queue) workers() []workerView {
	q.t.Helper()
	var page workersPageView
	q.json(&page, "workers")
	return page.Workers
}

// startWorkerChild starts the test binary as a worker process on the queue's Redis and waits
// for it to say it runs; it is killed when the test ends.
func (q *queue) startWorkerChild() *exec.Cmd {
	q.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerChildEnv+"="+q.addr)
	stdout, err := cmd.StdoutPipe()
	require.NoError(q.t, err)
	require.NoError(q.t, cmd.Start())
	q.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(q.t, err)
	require.Equal(q.t, "ready\n", line)
	return cmd
}

func TestWorkersListsAnotherProcesssSubscriberAndSchedulerUntilItIsKilled(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	child := q.startWorkerChild()
	pid := child.Process.Pid
	host, err := os.Hostname()
	require.NoError(t, err)

	var seen []workerView
	deadline := time.Now().Add(runTimeout)
	for len(seen) < 2 {
		require.True(t, time.Now().Before(deadline), "the child's workers were not listed: %+v", seen)
		seen = seen[:0]
		for _, w := range q.workers() {
			if w.PID == pid {
				seen = append(seen, w)
			}
		}
	}
	kinds := map[string]workerView{}
	for _, w := range seen {
		kinds[w.Kind] = w
		assert.Equal(t, host, w.Host)
		assert.WithinDuration(t, time.Now(), w.LastBeat, 3*workerBeat+2*time.Second)
	}
	require.Contains(t, kinds, "subscriber")
	require.Contains(t, kinds, "scheduler")
	assert.Equal(t, []subscriptionView{{Topic: topic, Group: "billing"}}, kinds["subscriber"].Subscriptions)
	assert.Contains(t, kinds["scheduler"].Subscriptions, subscriptionView{Topic: schedule.TickTopic, Group: schedule.TickGroup})
	out := q.ok("workers")
	assert.Regexp(t, `(?m)^KIND\s+HOST\s+PID\s+CONSUMER\s+STARTED\s+LAST BEAT\s+SUBSCRIPTIONS\s+IN FLIGHT$`, out)
	assert.Regexp(t, fmt.Sprintf(`(?m)^subscriber\s+%s\s+%d\s+\S+\s+\d+\S* ago\s+\d+\S* ago\s+orders/billing\s+0$`, host, pid), out)

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	expires := seen[0].Expires
	for _, w := range seen[1:] {
		if w.Expires.After(expires) {
			expires = w.Expires
		}
	}
	// The records expire WorkerRecordLifetimes heartbeats after their last refresh: the one
	// the listing read, or one since, before the kill. A listing that starts after that (the
	// test's Redis runs on this machine's clock) must not show them; the end of the first
	// listing without them bounds when they went, with slack for a run of the command on a
	// loaded machine.
	lifetime := time.Duration(redisdelay.WorkerRecordLifetimes) * workerBeat
	if expires.Before(killed.Add(lifetime)) {
		expires = killed.Add(lifetime)
	}
	const slack = 3 * time.Second
	bound := lifetime + slack
	for {
		start := time.Now()
		left := q.countWorkers(pid)
		if left == 0 {
			break
		}
		require.True(t, start.Before(expires.Add(250*time.Millisecond)), "%d records listed %s after they expired", left, start.Sub(expires))
		require.Less(t, time.Since(killed), bound, "the killed child's workers are still listed")
	}
	gone := time.Since(killed)
	assert.Less(t, gone, bound, "gone within their records' expiry")
	t.Logf("the killed child's workers were gone %s after SIGKILL (bound %s)", gone.Round(time.Millisecond), bound)
}

// countWorkers returns how many of the workers that workers -o json lists run in process pid.
func (q *queue) countWorkers(pid int) int {
	n := 0
	for _, w := range q.workers() {
		if w.PID == pid {
			n++
		}
	}
	return n
}

func TestWorkersPagesWithTheCursorAndSaysWhenNoneRuns(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	r := q.run("", "workers")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "No running Subscriber or Scheduler under the key prefix redisdelay: on this Redis.\n", r.stderr)

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	for _, g := range []string{"billing", "shipping"} {
		_, err := q.subscriber(redisdelay.SubscriberConfig{ConsumerGroup: g}).Subscribe(ctx, topic)
		require.NoError(t, err)
	}
	deadline := time.Now().Add(runTimeout)
	for len(q.workers()) < 2 { // each records itself from a goroutine of its first Subscribe
		require.True(t, time.Now().Before(deadline), "the Subscribers were not listed")
	}
	var first, second workersPageView
	q.json(&first, "workers", "--limit", "1")
	require.Len(t, first.Workers, 1)
	require.NotEmpty(t, first.NextCursor)
	q.json(&second, "workers", "--limit", "1", "--cursor", first.NextCursor)
	require.Len(t, second.Workers, 1)
	groups := []string{first.Workers[0].Subscriptions[0].Group, second.Workers[0].Subscriptions[0].Group}
	assert.ElementsMatch(t, []string{"billing", "shipping"}, groups)
	assert.Contains(t, q.ok("workers", "--limit", "1"), "next page: --cursor "+first.NextCursor)
	var schedulers workersPageView
	q.json(&schedulers, "workers", "--kind", "scheduler")
	assert.Empty(t, schedulers.Workers)

	r = q.run("", "workers", "--kind", "robot")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `unknown kind "robot"`)
}

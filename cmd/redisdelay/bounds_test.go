package main

import (
	"bufio"
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

func TestSchedulesBackfillOverTheDaySamoaSkippedPublishesEachTick(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.put(schedule.Schedule{Name: "nye", Spec: "59 23 31 12 *", TimeZone: "Pacific/Apia", Topic: topic})
	start := time.Now()
	out := q.ok("schedules", "backfill", "nye", "--from", "2011-01-01T00:00:00Z", "--to", "2013-01-01T00:00:00Z", "--yes")
	assert.Equal(t, "Backfilled schedule nye: published 3 ticks; 0 were published already.\n", out)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, int64(3), q.stats(topic, group).Due)
}

func TestSchedulesPutRefusesTheLocalTimeZone(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	r := q.run("", "schedules", "put", "nightly", "--spec", "0 3 * * *", "--tz", "Local", "--topic", topic)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `TimeZone "Local": is each host's own zone`)
	infos, _, err := schedule.List(context.Background(), q.in, "", 10)
	require.NoError(t, err)
	assert.Empty(t, infos, "nothing stored")
}

// TestEveryCommandStopsOnSIGTERM: a command waiting at its prompt (stdin stays open and
// silent) ends within the grace period after SIGTERM, with exit code 130.
func TestEveryCommandStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.put(schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: topic})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--addr", q.addr, "schedules", "backfill", "hourly", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	prompt, err := bufio.NewReader(stderr).ReadString('?')
	require.NoError(t, err)
	require.Contains(t, prompt, "Publish the ticks of schedule hourly")

	signalled := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
		assert.Equal(t, 130, cmd.ProcessState.ExitCode())
		assert.Less(t, time.Since(signalled), stopGrace+2*time.Second)
	case <-time.After(stopGrace + 5*time.Second):
		t.Fatal("the command did not stop after SIGTERM")
	}
}

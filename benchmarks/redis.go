package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the redis-server process this program started, or nil when REDIS_ADDR names
// one given by the user.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server from PATH on a free loopback port, without persistence.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not on the PATH (install it, or set REDIS_ADDR): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "redisdelay-bench-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		// No memory limit: the scale scenario holds 10M messages (about 3 GB).
		"--maxmemory", "0",
		"--logfile", filepath.Join(dir, "redis.log"),
		// 1000 idle subscriptions of redisstream each hold a blocked connection.
		"--maxclients", "10000",
	)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited: %s", strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s not ready: %w", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server and removes its directory. It is idempotent.
func (s *redisServer) stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
	s.cmd = nil
}

// newClient returns a go-redis client for addr with the given pool size.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
}

// info returns one integer field of an INFO section.
func info(ctx context.Context, c *redis.Client, section, field string) (int64, error) {
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == field {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO " + section + " has no " + field)
}

// redisStats is a snapshot of the server's CPU time and per-command counters, for -redis-stats.
type redisStats struct {
	cpu      float64 // used_cpu_user + used_cpu_sys, seconds
	commands map[string][2]float64
}

func snapshotStats(ctx context.Context, c *redis.Client) (redisStats, error) {
	s := redisStats{commands: map[string][2]float64{}}
	text, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			var calls, usec float64
			for _, f := range strings.Split(v, ",") {
				fk, fv, _ := strings.Cut(f, "=")
				switch fk {
				case "calls":
					calls, _ = strconv.ParseFloat(fv, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(fv, 64)
				}
			}
			s.commands[strings.TrimPrefix(k, "cmdstat_")] = [2]float64{calls, usec}
		}
	}
	return s, nil
}

// describe summarizes what happened between two snapshots taken wall apart.
func (s redisStats) describe(before redisStats, wall time.Duration) string {
	type row struct {
		name        string
		calls, usec float64
	}
	var rows []row
	for name, v := range s.commands {
		b := before.commands[name]
		if d := v[0] - b[0]; d > 0 {
			rows = append(rows, row{name, d, v[1] - b[1]})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.usec, a.usec) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "redis-server CPU %.0f%% of one core over %s;", 100*(s.cpu-before.cpu)/wall.Seconds(), wall.Round(time.Millisecond))
	for i, r := range rows {
		if i == 6 {
			break
		}
		fmt.Fprintf(&sb, " %s %.0f calls %.1fµs/call;", r.name, r.calls, r.usec/r.calls)
	}
	return sb.String()
}

// commandRates samples INFO stats total_commands_processed once a second for window and
// returns the average commands/s over the window and the busiest one-second sample's rate,
// commands/s. Each sample's own INFO is not counted.
func commandRates(ctx context.Context, c *redis.Client, window time.Duration) (avg, peak float64, err error) {
	first, err := info(ctx, c, "stats", "total_commands_processed")
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	prev, prevAt := first, start
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	samples := 0
	for prevAt.Sub(start) < window-time.Second/2 {
		<-ticker.C
		n, err := info(ctx, c, "stats", "total_commands_processed")
		if err != nil {
			return 0, 0, err
		}
		at := time.Now()
		peak = max(peak, float64(n-prev-1)/at.Sub(prevAt).Seconds())
		prev, prevAt = n, at
		samples++
	}
	return float64(prev-first-int64(samples)) / prevAt.Sub(start).Seconds(), peak, nil
}

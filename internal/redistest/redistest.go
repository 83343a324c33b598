// Package redistest starts throw-away redis-server processes on free loopback ports for tests.
//
// When redis-server is not on the PATH, Start skips the test with a message, unless the
// environment variable REDISDELAY_REQUIRE_REDIS is "1" (as in CI), which makes it fail instead.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server into a failure.
const RequireEnv = "REDISDELAY_REQUIRE_REDIS"

// Server is one redis-server process bound to 127.0.0.1.
type Server struct {
	Addr string
	Dir  string // working directory, where AOF files go

	bin       string
	args      []string
	supervise bool

	mu      sync.Mutex // guards cmd, done and stopped
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	stopped bool
}

// Options configure a Server.
type Options struct {
	// AppendOnly turns on AOF persistence with appendfsync "always", so a restart keeps every
	// acknowledged write.
	AppendOnly bool
	// Extra are further redis-server arguments, such as "--cluster-enabled", "yes".
	Extra []string
	// Supervise restarts the server on the same port, with the same data, whenever it exits
	// other than through Stop, as a service manager would; see CrashCommand.
	Supervise bool
}

// Binary returns the redis-server path, skipping or failing t when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server is not on the PATH and %s=1", RequireEnv)
		}
		skip(t, fmt.Sprintf("redis-server is not on the PATH; install it (apt-get install redis-server) or set %s=1 to make this a failure", RequireEnv))
	}
	return bin
}

// skips counts the tests of this test binary that Binary or SkipIfNotInstalled skipped, and
// keeps the first reason, for ReportSkips.
var skips struct {
	mu     sync.Mutex
	n      int
	reason string
}

// skip records t's skip for ReportSkips and skips t.
func skip(t testing.TB, reason string) {
	t.Helper()
	skips.mu.Lock()
	skips.n++
	if skips.reason == "" {
		skips.reason = reason
	}
	skips.mu.Unlock()
	t.Skip(reason)
}

// ReportSkips prints one line saying how many tests of this test binary were skipped because
// redis-server or redis-cli is missing, and why, and one naming the long proofs that were left
// out or ran short for want of REDISDELAY_LONG=1 (see LongEnv); it prints nothing when there is
// neither. Call it from
// TestMain after m.Run. go test shows what a passing package prints only with -v, so the line
// goes to the terminal (/dev/tty) when there is one, and to stderr otherwise.
func ReportSkips() {
	line := skipReport() + longReport()
	if line == "" {
		return
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if _, err := tty.WriteString(line); err == nil {
			return
		}
	}
	fmt.Fprint(os.Stderr, line)
}

// skipReport is ReportSkips' line, or "" when no test was skipped.
func skipReport() string {
	skips.mu.Lock()
	defer skips.mu.Unlock()
	if skips.n == 0 {
		return ""
	}
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	return fmt.Sprintf("SKIPPED %d real-Redis tests in %s: %s\n", skips.n, pkg, skips.reason)
}

// Start starts a redis-server on a free loopback port and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	s, err := newServer(bin, t.TempDir(), opts)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// newServer starts a redis-server on a free loopback port with its files in dir. The caller
// must Stop it.
func newServer(bin, dir string, opts Options) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"),
		"--pidfile", filepath.Join(dir, "redis.pid"),
	}
	if opts.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, opts.Extra...)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, bin: bin, args: args, supervise: opts.Supervise}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	s.mu.Lock()
	s.stopped = false
	err := s.launch()
	done, pid := s.done, 0
	if err == nil {
		pid = s.cmd.Process.Pid
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.waitReady(10*time.Second, done, pid)
}

// launch starts the process; s.mu is held.
func (s *Server) launch() error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() {
		_ = cmd.Wait()
		close(done)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.supervise && !s.stopped && s.cmd == cmd {
			time.Sleep(100 * time.Millisecond) // like a service manager's restart delay
			if err := s.launch(); err != nil {
				fmt.Fprintf(os.Stderr, "redistest: restarting redis-server on %s: %v\n", s.Addr, err)
			}
		}
	}()
	return nil
}

// CrashCommand returns a shell command that kills the server with SIGKILL, as a crash would.
// With Options.Supervise the server comes back by itself.
func (s *Server) CrashCommand() []string {
	return []string{"sh", "-c", "kill -9 $(cat " + filepath.Join(s.Dir, "redis.pid") + ")"}
}

// waitReady waits until the server process pid answers on s.Addr, at most timeout, and fails
// at once when it exits (done closed). An answer from another process does not count.
func (s *Server) waitReady(timeout time.Duration, done chan struct{}, pid int) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r\n") {
			return nil
		}
		if err == nil {
			// Another server answers on the port, which FreePort gave out again (another
			// node of a cluster started at the same time): this one cannot bind it, and exits.
			err = fmt.Errorf("another process answers on %s", s.Addr)
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server exited: %s", strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %s: %w", s.Addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL) and waits for it to exit. It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopped = true
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Signal sends sig to the server process: SIGSTOP and SIGCONT make it stall and resume, as a
// long pause would.
func (s *Server) Signal(sig os.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("redistest: %s is not running", s.Addr)
	}
	return cmd.Process.Signal(sig)
}

// Restart kills the server and starts it again on the same port with the same data directory,
// waiting until it answers PING. It also starts a stopped server.
func (s *Server) Restart() error {
	s.Stop()
	return s.start()
}

// Client returns a client for the server that is closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// infoFields parses the "key:value" lines of an INFO or CLUSTER INFO reply.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// nodeClient is a plain client for one node, for administrative commands.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

// waitUntil calls check every 50 ms until it returns nil, or returns its last error when ctx
// ends.
func waitUntil(ctx context.Context, check func(context.Context) error) error {
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// LongEnv is the environment variable that runs the long proofs in full: with
// REDISDELAY_LONG=1 (as .ci/run sets it) the tests that SkipUnlessLong gates run, and those that
// ask Long run their long version (10,000 model operations, a minute of SIGKILLs, every
// backend). Without it the package runs the quick version and ReportSkips names what it left
// out or shortened.
const LongEnv = "REDISDELAY_LONG"

// Long reports whether REDISDELAY_LONG=1, and when not records t's test as shortened, for
// ReportSkips. A test calls it to choose between its long version and its quick one.
func Long(t testing.TB) bool {
	if os.Getenv(LongEnv) == "1" {
		return true
	}
	long.record(&long.shortened, t)
	return false
}

// SkipUnlessLong skips t, recording it for ReportSkips, unless REDISDELAY_LONG=1. why says in
// a few words what the test proves and how long it takes, for the skip message.
func SkipUnlessLong(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(LongEnv) == "1" {
		return
	}
	long.record(&long.left, t)
	t.Skipf("a long proof (%s): %s=1 runs it", why, LongEnv)
}

// OneBackend is, in the quick run, the one backend of the tests written against every backend
// (a redis-server, miniredis and a Redis Cluster): "redis" when redis-server is on the PATH or
// REDISDELAY_REQUIRE_REDIS=1, else "miniredis"; it records that for ReportSkips. With
// REDISDELAY_LONG=1 it is "": they run against every backend.
func OneBackend() string {
	if os.Getenv(LongEnv) == "1" {
		return ""
	}
	name := "miniredis"
	if _, err := exec.LookPath("redis-server"); err == nil || os.Getenv(RequireEnv) == "1" {
		name = "redis"
	}
	long.mu.Lock()
	defer long.mu.Unlock()
	long.backend = name
	return name
}

// longTests holds the names of the top-level tests that ran short or were left out, and the
// one backend of the quick run once OneBackend was asked.
type longTests struct {
	mu              sync.Mutex
	left, shortened []string
	backend         string
}

var long longTests

// record adds t's top-level test name to list once.
func (l *longTests) record(list *[]string, t testing.TB) {
	name, _, _ := strings.Cut(t.Name(), "/")
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(*list, name) {
		*list = append(*list, name)
	}
}

// longReport is ReportSkips' line about the long proofs, or "" when every one ran in full.
func longReport() string {
	long.mu.Lock()
	defer long.mu.Unlock()
	if len(long.left) == 0 && len(long.shortened) == 0 && long.backend == "" {
		return ""
	}
	var parts []string
	if long.backend != "" {
		parts = append(parts, "ran the tests of every backend on "+long.backend+" only")
	}
	if len(long.left) > 0 {
		parts = append(parts, "left out "+strings.Join(long.left, ", "))
	}
	if len(long.shortened) > 0 {
		parts = append(parts, "ran short "+strings.Join(long.shortened, ", "))
	}
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	return fmt.Sprintf("QUICK RUN of %s: %s; %s=1 runs the long proofs in full (as .ci/run does)\n",
		pkg, strings.Join(parts, "; "), LongEnv)
}

// Announce writes one line to the terminal, when there is one, saying that the tests of this
// test binary start and what they are: go test prints a package's result only when its tests
// end, and in the order of the packages, so a package that takes minutes leaves the terminal
// silent meanwhile. Call it from TestMain before m.Run.
func Announce(what string) {
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		_, _ = fmt.Fprintf(tty, "RUNNING %s: %s\n", pkg, what)
	}
}

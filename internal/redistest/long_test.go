package redistest

import (
	"strings"
	"testing"
)

// TestLongProofsLeftOutOrShortenedAreNamedInTheSummaryLine checks the line ReportSkips prints
// without REDISDELAY_LONG=1: the tests SkipUnlessLong left out and those Long shortened, each
// named once, and how to run them in full; and that with REDISDELAY_LONG=1 both run in full.
func TestLongProofsLeftOutOrShortenedAreNamedInTheSummaryLine(t *testing.T) {
	long.mu.Lock()
	saved := longTests{left: long.left, shortened: long.shortened}
	long.left, long.shortened = nil, nil
	long.mu.Unlock()
	t.Cleanup(func() {
		long.mu.Lock()
		long.left, long.shortened = saved.left, saved.shortened
		long.mu.Unlock()
	})

	t.Setenv(LongEnv, "1")
	var ranLong bool
	t.Run("full", func(t *testing.T) {
		SkipUnlessLong(t, "a proof")
		ranLong = Long(t)
	})
	if !ranLong || longReport() != "" {
		t.Fatalf("with %s=1: ran long %v, report %q; want the long version and no report", LongEnv, ranLong, longReport())
	}

	t.Setenv(LongEnv, "")
	t.Run("a", func(t *testing.T) { SkipUnlessLong(t, "a proof") })
	t.Run("a", func(t *testing.T) { SkipUnlessLong(t, "a proof") })
	t.Run("b", func(t *testing.T) {
		if Long(t) || Long(t) {
			t.Error("Long without REDISDELAY_LONG=1")
		}
	})
	line := longReport()
	name := t.Name()
	want := "left out " + name + "; ran short " + name + "; " + LongEnv + "=1 runs the long proofs in full"
	if !strings.HasPrefix(line, "QUICK RUN of ") || !strings.Contains(line, want) || !strings.HasSuffix(line, "\n") {
		t.Fatalf("report %q, want it to contain %q", line, want)
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// instructions returns how many instructions the redis-server of -callgrind ran in script
// calls (evalShaCommand and what it calls) since the previous call: it asks callgrind for a
// dump, which also zeroes its counts, and reads the dump's totals. -1 without -callgrind.
func instructions() (int64, error) {
	if *grind == "" {
		return -1, nil
	}
	pid, dir, ok := strings.Cut(*grind, ":")
	if !ok {
		return 0, fmt.Errorf("-callgrind %q: want PID:DIR", *grind)
	}
	before, _ := filepath.Glob(filepath.Join(dir, "callgrind.out."+pid+".*"))
	if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control: %v: %s", err, out)
	}
	// The dump is written once the process runs again (its event loop wakes within 100 ms).
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(dir, "callgrind.out."+pid+".*"))
		for _, f := range files {
			if !slices.Contains(before, f) {
				return dumpTotals(f)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("callgrind wrote no dump within a minute")
}

// dumpTotals reads the "totals:" line of a callgrind dump, waiting for it to be complete.
func dumpTotals(file string) (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(file)
		if err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "totals: "); ok {
					return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s: no totals line", file)
}

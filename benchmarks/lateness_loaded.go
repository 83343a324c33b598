package main

// The lateness_loaded scenario: the lateness measurement while the same Redis serves other
// traffic, about loadRate commands/s from a client of its own.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// loadRate is the other traffic's target, commands/s.
	loadRate = 50_000
	// loadWorkers goroutines each send a pipeline of loadPipeline commands every
	// loadWorkers*loadPipeline/loadRate (2 ms with these values).
	loadWorkers  = 4
	loadPipeline = 25
	// loadKeys is the number of unrelated keys the traffic reads and writes.
	loadKeys = 10_000
)

func init() {
	figures = append(figures,
		figure{id: "lateness_loaded_p50", title: "delayed lateness p50, Redis serving 50k cmd/s of other traffic", unit: "ms", lowerBetter: true},
		figure{id: "lateness_loaded_p99", title: "delayed lateness p99, other traffic", unit: "ms", lowerBetter: true},
		figure{id: "lateness_loaded_p999", title: "delayed lateness p99.9, other traffic", unit: "ms", lowerBetter: true},
		figure{id: "lateness_loaded_max", title: "delayed lateness max, other traffic", unit: "ms", lowerBetter: true},
		figure{id: "lateness_loaded_early", title: "delayed early deliveries, other traffic", unit: "count", lowerBetter: true},
	)
	scenarioNames = append(scenarioNames, "lateness_loaded")
}

// runLatenessLoaded is runLateness while startLoad's traffic runs.
func (b *bench) runLatenessLoaded(sys system) error {
	return b.measureLateness(sys, "lateness_loaded", b.startLoad)
}

// startLoad starts loadWorkers goroutines on a client of their own that send pipelined GET, SET
// and INCR on loadKeys keys of their own, paced to loadRate commands/s in all. The function it
// returns stops them, waits for them, and describes the achieved rate: the generator's count of
// commands answered, and INFO stats total_commands_processed over the same window (which
// counts the measured system's commands too, and those its scripts run).
func (b *bench) startLoad() func() string {
	client := newClient(b.addr, loadWorkers+2)
	ctx, cancel := context.WithCancel(context.Background())
	processedBefore, _ := info(ctx, b.admin, "stats", "total_commands_processed")
	start := time.Now()
	var (
		wg     sync.WaitGroup
		sent   atomic.Int64
		failed atomic.Int64
	)
	period := time.Duration(loadWorkers*loadPipeline) * time.Second / loadRate
	prefix := b.topic("load") + ":"
	for g := range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loadWorker(ctx, client, prefix, g, period, &sent, &failed)
		}()
	}
	return func() string {
		cancel()
		wg.Wait()
		took := time.Since(start)
		_ = client.Close()
		processed, _ := info(context.Background(), b.admin, "stats", "total_commands_processed")
		note := fmt.Sprintf("other traffic %.0f cmd/s (Redis processed %.0f cmd/s in all)",
			float64(sent.Load())/took.Seconds(), float64(processed-processedBefore)/took.Seconds())
		if n := failed.Load(); n > 0 {
			note = joinNote(note, fmt.Sprintf("%d other-traffic pipelines failed", n))
		}
		progress("  %s", note)
		return note
	}
}

// loadWorker sends one pipeline of loadPipeline commands per period, on a schedule of its own
// (a late pipeline is sent at once and the next ones catch up, by 10 periods at most, so that
// the load stays bounded when Redis falls behind), until ctx ends.
func loadWorker(ctx context.Context, client *redis.Client, prefix string, g int, period time.Duration, sent, failed *atomic.Int64) {
	next := time.Now().Add(time.Duration(g) * period / loadWorkers)
	for i := 0; ; i++ {
		if w := time.Until(next); w > 0 {
			select {
			case <-time.After(w):
			case <-ctx.Done():
				return
			}
		} else if ctx.Err() != nil {
			return
		}
		if floor := time.Now().Add(-10 * period); next.Before(floor) {
			next = floor
		}
		next = next.Add(period)
		pipe := client.Pipeline()
		for j := range loadPipeline {
			key := prefix + strconv.Itoa((g*7919+i*loadPipeline+j)%loadKeys)
			switch j % 3 {
			case 0:
				pipe.Get(ctx, key)
			case 1:
				pipe.Set(ctx, key, "v", 0)
			default:
				pipe.Incr(ctx, key+":n")
			}
		}
		_, err := pipe.Exec(ctx)
		if err != nil && err != redis.Nil && ctx.Err() == nil {
			failed.Add(1)
			continue
		}
		if ctx.Err() == nil {
			sent.Add(loadPipeline)
		}
	}
}

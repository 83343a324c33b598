package main

// The schedules scenario (redisdelay only): the lateness of periodic schedules' ticks, what a
// tick costs Redis, and what 1,000 idle schedules cost.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

func init() {
	figures = append(figures,
		figure{id: "tick_lateness_p50", title: "schedule tick lateness p50 (tick -> handler)", unit: "ms", lowerBetter: true, oursOnly: true},
		figure{id: "tick_lateness_p99", title: "schedule tick lateness p99", unit: "ms", lowerBetter: true, oursOnly: true},
		figure{id: "tick_lateness_max", title: "schedule tick lateness max", unit: "ms", lowerBetter: true, oursOnly: true},
		figure{id: "tick_early", title: "schedule ticks delivered early", unit: "count", lowerBetter: true, oursOnly: true},
		figure{id: "tick_duplicates", title: "schedule ticks delivered twice or missing", unit: "count", lowerBetter: true, oursOnly: true},
		figure{id: "tick_scripts", title: "script calls per tick, Schedulers only", unit: "calls", lowerBetter: true, oursOnly: true},
		figure{id: "tick_commands", title: "Redis commands per tick (inside scripts too), Schedulers only", unit: "cmds", lowerBetter: true, oursOnly: true},
		figure{id: "tick_cpu", title: "Redis CPU per tick, Schedulers only", unit: "µs", lowerBetter: true, oursOnly: true},
		figure{id: "schedules_idle", title: "idle Redis commands, 1,000 schedules, 2 Schedulers", unit: "cmd/s", lowerBetter: true, oursOnly: true},
	)
	scenarioNames = append(scenarioNames, "schedules")
}

// runSchedules measures, with 2 Schedulers and one consumer group:
//   - lateness: sz.tickSchedules schedules of "@every 1s" for sz.tickWindow, from each tick's
//     nominal time to the consumer's handler;
//   - cost: the same schedules with no consumer group (the messages park), Redis calls and
//     CPU per tick from INFO commandstats;
//   - idle: 1,000 schedules of "@daily" whose ticks do not fall due in the window.
func (b *bench) runSchedules(sys system) error {
	if sys.name() != sysRedisDelay {
		return nil
	}
	if err := b.reset(); err != nil {
		return err
	}
	client := newClient(b.addr, 0)
	defer client.Close()
	prefix := "bench-" + b.runID + "-sched:"
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, nil)
	if err != nil {
		return err
	}
	var admin *schedule.Scheduler
	for i := 0; i < 2; i++ {
		s, err := schedule.New(schedule.Config{Publisher: pub}, nil)
		if err != nil {
			return err
		}
		defer s.Close()
		admin = s
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}

	// Cost: no group on the topic, so only the Schedulers work.
	names := make([]string, b.sz.tickSchedules)
	for i := range names {
		names[i] = fmt.Sprintf("cost-%03d", i)
		if _, err := admin.Put(ctx, schedule.Schedule{Name: names[i], Spec: "@every 1s", Topic: "bench-sched-cost"}); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // past the first ticks
	published := func() (int64, error) {
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix}, nil)
		if err != nil {
			return 0, err
		}
		var n int64
		after := ""
		for {
			page, more, err := schedule.List(ctx, in, after, 1000)
			if err != nil {
				return 0, err
			}
			for _, s := range page {
				n += s.Published
			}
			if !more {
				return n, nil
			}
			after = page[len(page)-1].Schedule.Name
		}
	}
	p0, err := published()
	if err != nil {
		return err
	}
	s0, err := snapshotStats(ctx, b.admin)
	if err != nil {
		return err
	}
	time.Sleep(b.sz.tickWindow / 2)
	s1, err := snapshotStats(ctx, b.admin)
	if err != nil {
		return err
	}
	p1, err := published()
	if err != nil {
		return err
	}
	ticks := float64(p1 - p0)
	var calls, scripts, usec float64
	for cmd, v := range s1.commands {
		if cmd == "info" {
			continue
		}
		calls += v[0] - s0.commands[cmd][0]
		if cmd == "evalsha" || cmd == "eval" {
			scripts += v[0] - s0.commands[cmd][0]
			usec += v[1] - s0.commands[cmd][1] // a script's usec includes its commands'
		}
	}
	// The Inspector's reads (one script per page, twice) are counted too; at this scale they
	// are a few calls out of thousands.
	note := fmt.Sprintf("%d schedules @every 1s, %d ticks, 2 Schedulers, no group (messages park)", len(names), int(ticks))
	b.res.set("tick_scripts", sys.name(), scripts/ticks, note)
	b.res.set("tick_commands", sys.name(), calls/ticks, note+"; INFO commandstats counts the commands inside scripts too")
	b.res.set("tick_cpu", sys.name(), usec/ticks, "commandstats usec of the script calls (which include the commands they run) / ticks; the few plain commands are left out")
	for _, n := range names {
		if err := admin.Delete(ctx, n); err != nil {
			return err
		}
	}

	// Lateness: a consumer group on the topic.
	// No new-group window: its end (a minute after the group registered) frees the messages it
	// kept in steps that would fall into the idle measurement below.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, KeyPrefix: prefix, ConsumerGroup: "bench", NewGroupWindow: -1}, nil)
	if err != nil {
		return err
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "bench-sched")
	if err != nil {
		return err
	}
	var mu sync.Mutex
	lateness := []time.Duration{}
	seen := map[string]int{}
	early := 0
	measuring := false
	go func() {
		for msg := range msgs {
			at := time.Now()
			tick, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.TickTimeMetadataKey))
			msg.Ack()
			if err != nil {
				continue
			}
			mu.Lock()
			if measuring {
				if at.Before(tick) {
					early++
				}
				lateness = append(lateness, at.Sub(tick))
				seen[msg.Metadata.Get(redisdelay.KeyMetadataKey)]++
			}
			mu.Unlock()
		}
	}()
	for i := range names {
		names[i] = fmt.Sprintf("late-%03d", i)
		if _, err := admin.Put(ctx, schedule.Schedule{Name: names[i], Spec: "@every 1s", Topic: "bench-sched", Payload: message.Payload(b.payload)}); err != nil {
			return err
		}
	}
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	measuring = true
	mu.Unlock()
	time.Sleep(b.sz.tickWindow)
	mu.Lock()
	measuring = false
	lat := slices.Clone(lateness)
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	mu.Unlock()
	for _, n := range names {
		if err := admin.Delete(ctx, n); err != nil {
			return err
		}
	}
	if len(lat) == 0 {
		return fmt.Errorf("no tick delivered in %s", b.sz.tickWindow)
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	note = fmt.Sprintf("%d schedules @every 1s (their ticks fall due together each second), %d ticks, 2 Schedulers, 1 consumer", len(names), len(lat))
	b.res.set("tick_lateness_p50", sys.name(), ms(lat[len(lat)/2]), note)
	b.res.set("tick_lateness_p99", sys.name(), ms(lat[len(lat)*99/100]), note)
	b.res.set("tick_lateness_max", sys.name(), ms(lat[len(lat)-1]), note)
	b.res.set("tick_early", sys.name(), float64(early), note)
	b.res.set("tick_duplicates", sys.name(), float64(dups), "keys delivered more than once in the window")

	// Idle: 1,000 schedules that do not tick in the window.
	for i := 0; i < 1000; i++ {
		if _, err := admin.Put(ctx, schedule.Schedule{Name: fmt.Sprintf("idle-%04d", i), Spec: "0 0 3 * * *", Topic: "bench-sched-idle"}); err != nil {
			return err
		}
	}
	time.Sleep(time.Second)
	w := b.watch()
	idle0, err := snapshotStats(ctx, b.admin)
	if err != nil {
		return err
	}
	before, err := info(ctx, b.admin, "stats", "total_commands_processed")
	if err != nil {
		return err
	}
	start := time.Now()
	time.Sleep(b.sz.idleWindow)
	after, err := info(ctx, b.admin, "stats", "total_commands_processed")
	if err != nil {
		return err
	}
	w("schedules idle")
	if idle1, err := snapshotStats(ctx, b.admin); err == nil {
		progress("  schedules idle: %s", idle1.describe(idle0, b.sz.idleWindow))
	}
	b.res.set("schedules_idle", sys.name(), float64(after-before-1)/time.Since(start).Seconds(), "1,000 daily schedules, none due in the window, 2 Schedulers (Concurrency 4 each); Lua-internal commands count")
	return nil
}

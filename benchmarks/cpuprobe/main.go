// Command cpuprobe measures what one message costs Redis, per feature it uses: the Redis CPU
// (INFO commandstats usec of the script calls) and the Redis commands (every command, those run
// inside scripts included) per message, for publishing it and for claiming and acknowledging
// it, with the topic's new-group window open (as in the first minute of every topic) and
// closed.
//
// It builds against this checkout and, with -tags old, against an older one (the cases that
// build lacks print as n/a), so that two builds can run alternately against one redis-server:
// see benchmarks/README.md, "Features and builds". It flushes the server at -addr between
// cases: give it a scratch server, never a shared one.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/watermill-redisdelay/redisdelay"
)

var (
	addr    = flag.String("addr", "", "a scratch redis-server (host:port) the probe may flush; required")
	label   = flag.String("label", "new", "the build's name in the output")
	n       = flag.Int("n", 20000, "messages per case")
	workers = flag.Int("workers", 16, "publishing goroutines")
	cases   = flag.String("cases", "plain,plain-100", "cases: "+strings.Join(caseNames(), ","))
	windows = flag.String("windows", "open,closed", "new-group window states: open, closed")
	detail  = flag.Bool("detail", false, "also print the commands per message, by command")
	grind   = flag.String("callgrind", "", "PID:DIR of a redis-server run under valgrind's callgrind (see instructions.sh): also report the instructions Redis ran in script calls per message")
	payload = []byte(strings.Repeat("x", 100))
)

// A probe case: how its messages are made and published.
type probeCase struct {
	perCall int                                    // messages per Publish
	prepare func(i int, msg *message.Message) bool // false: this build lacks the feature
	config  func(c *redisdelay.PublisherConfig, topic string)
	items   int // messages handed out per released message (a batch's items), 1 when zero
}

func main() {
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "cpuprobe: -addr is required (a scratch redis-server it may flush)")
		os.Exit(2)
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: *addr})
	defer admin.Close()
	for _, window := range strings.Split(*windows, ",") {
		for _, name := range strings.Split(*cases, ",") {
			c, ok := probeCases()[name]
			if !ok {
				fmt.Fprintf(os.Stderr, "cpuprobe: unknown case %q (want one of %s)\n", name, strings.Join(caseNames(), ", "))
				os.Exit(2)
			}
			if err := run(ctx, admin, name, window, c); err != nil {
				fmt.Fprintf(os.Stderr, "cpuprobe: %s, window %s: %v\n", name, window, err)
				os.Exit(1)
			}
		}
	}
}

func caseNames() []string {
	var names []string
	for name := range probeCases() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// run measures one case with the window in state window and prints a line per phase.
func run(ctx context.Context, admin *redis.Client, name, window string, c probeCase) error {
	if !windowSupported(window) || !c.prepare(0, message.NewMessage("x", nil)) {
		fmt.Printf("build=%s window=%s case=%s n/a\n", *label, window, name)
		return nil
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return err
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 32})
	defer client.Close()
	topic := "probe-" + name
	pcfg := redisdelay.PublisherConfig{Client: client}
	if c.config != nil {
		c.config(&pcfg, topic)
		c.config(&pcfg, topic+"-warm-up")
	}
	pub, err := redisdelay.NewPublisher(pcfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	scfg := redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g"}
	setWindow(&scfg, window)
	sub, err := redisdelay.NewSubscriber(scfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	// Warm up on another topic: the scripts load (EVAL on NOSCRIPT) outside the counts.
	for _, t := range []string{topic + "-warm-up", topic} {
		if err := sub.SubscribeInitialize(t); err != nil {
			return err
		}
	}
	if err := publishAll(pub, topic+"-warm-up", c, c.perCall); err != nil {
		return err
	}
	if err := consume(ctx, sub, topic+"-warm-up", c.perCall/max(c.items, 1)); err != nil {
		return err
	}

	if _, err := instructions(); err != nil {
		return err
	}
	before, err := commandStats(ctx, admin)
	if err != nil {
		return err
	}
	if err := publishAll(pub, topic, c, *n); err != nil {
		return err
	}
	published, err := commandStats(ctx, admin)
	if err != nil {
		return err
	}
	ins, err := instructions()
	if err != nil {
		return err
	}
	report(name, window, "publish", before, published, ins)
	if err := consume(ctx, sub, topic, *n/max(c.items, 1)); err != nil {
		return err
	}
	// Close confirms the last acks.
	if err := sub.Close(); err != nil {
		return err
	}
	consumed, err := commandStats(ctx, admin)
	if err != nil {
		return err
	}
	if ins, err = instructions(); err != nil {
		return err
	}
	report(name, window, "claim+ack", published, consumed, ins)
	return nil
}

// publishAll publishes total messages of case c from the -workers goroutines, c.perCall per
// Publish.
func publishAll(pub message.Publisher, topic string, c probeCase, total int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(int64(c.perCall))) - c.perCall
				if start >= total {
					return
				}
				msgs := make([]*message.Message, 0, c.perCall)
				for i := start; i < min(start+c.perCall, total); i++ {
					msg := message.NewMessage(watermill.NewUUID(), payload)
					c.prepare(i, msg)
					msgs = append(msgs, msg)
				}
				if err := pub.Publish(topic, msgs...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// consume acknowledges want messages of topic with one subscription.
func consume(ctx context.Context, sub message.Subscriber, topic string, want int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	deadline := time.After(2 * time.Minute)
	for got := 0; got < want; got++ {
		select {
		case msg, ok := <-ch:
			if !ok {
				return fmt.Errorf("%s: the subscription ended after %d of %d messages", topic, got, want)
			}
			msg.Ack()
		case <-deadline:
			return fmt.Errorf("%s: %d of %d messages in 2 minutes", topic, got, want)
		}
	}
	return nil
}

// stats is INFO commandstats: command -> calls and usec.
type stats map[string][2]float64

func commandStats(ctx context.Context, c *redis.Client) (stats, error) {
	text, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	s := stats{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(line, ":")
		var v [2]float64
		for _, f := range strings.Split(fields, ",") {
			k, val, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(val, 64)
			switch k {
			case "calls":
				v[0] = x
			case "usec":
				v[1] = x
			}
		}
		s[name] = v
	}
	return s, sc.Err()
}

// scripts are the commands whose time is the Redis CPU of a message (the commands a script
// runs are inside its time); probe is what the probe itself sends.
var (
	scripts = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}
	probe   = map[string]bool{"info": true, "flushall": true}
)

// report prints the cost per message of one phase.
func report(name, window, phase string, before, after stats, ins int64) {
	var calls, usec, cmds float64
	var by []string
	for cmd, v := range after {
		d := [2]float64{v[0] - before[cmd][0], v[1] - before[cmd][1]}
		if d[0] == 0 || probe[cmd] {
			continue
		}
		if scripts[cmd] {
			calls += d[0]
			usec += d[1]
		}
		cmds += d[0]
		by = append(by, fmt.Sprintf("%s=%.2f", cmd, d[0]/float64(*n)))
	}
	slices.Sort(by)
	m := float64(*n)
	fmt.Printf("build=%s window=%s case=%s phase=%s msgs=%d script_us_per_msg=%.2f cmds_per_msg=%.2f calls_per_msg=%.3f us_per_call=%.1f\n",
		*label, window, name, phase, *n, usec/m, cmds/m, calls/m, usec/max(calls, 1))
	if ins >= 0 {
		fmt.Printf("build=%s window=%s case=%s phase=%s instructions_per_msg=%.0f\n", *label, window, name, phase, float64(ins)/m)
	}
	if *detail {
		fmt.Printf("  %s\n", strings.Join(by, " "))
	}
}

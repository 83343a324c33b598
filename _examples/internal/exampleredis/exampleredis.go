// Package exampleredis gives each example its Redis: the server at REDIS_ADDR (host:port, or a
// redis:// URL; REDIS_URL when REDIS_ADDR is not set), as the redisdelay CLI reads them, or
// else an embedded miniredis. On a server the example's keys live under a key prefix of its
// own, "redisdelay-example-" and its name, so that the CLI and the dashboard find its queues
// with --prefix. A run starts by deleting what an earlier run left there, so runs of one
// example on one server must not overlap. When the run ends it deletes its keys too, unless
// -keep asked to keep them, and prints the redisdelay commands that show what it leaves: stats,
// and those the example added with Look.
package exampleredis

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
)

// KeepUsage is the usage of each example's -keep flag, which Open takes as keep.
const KeepUsage = "keep the example's keys in Redis when it ends, to look at its queues with the redisdelay CLI"

// closeTimeout bounds the deletion of the example's keys when it ends.
const closeTimeout = 10 * time.Second

// Redis is an example's Redis and the key prefix of its queues.
type Redis struct {
	Client *redis.Client
	// Prefix is the KeyPrefix of the example's publishers, subscribers and inspectors.
	Prefix string

	name string
	addr string               // as the environment gave it; "" on miniredis
	mr   *miniredis.Miniredis // nil on a server
	keep bool
	logf func(format string, args ...any) // prints a line of the example's timeline
	// looks are the commands Close prints after stats, in the order Look added them.
	looks []look
}

// look is a redisdelay command that shows something an example leaves in Redis.
type look struct {
	what string   // what it shows, printed as a shell comment above it
	args []string // the command and its flags, without --addr and --prefix
}

// Look adds a redisdelay command that shows something the example leaves in Redis with -keep:
// what says what it shows; args are the command and its flags, such as "list", "--topic",
// topic, "--group", group, "--state", "scheduled", without --addr and --prefix, which Close
// adds after the command's words. Close prints them after the stats command, in the order they
// were added.
func (r *Redis) Look(what string, args ...string) {
	r.looks = append(r.looks, look{what: what, args: args})
}

// Open connects to the Redis at REDIS_ADDR or REDIS_URL, deleting what an earlier run of the
// example left under its prefix, or starts an embedded miniredis when neither is set. logf
// prints a line of the example's timeline. The caller must call Close.
func Open(ctx context.Context, name string, keep bool, logf func(format string, args ...any)) (*Redis, error) {
	r := &Redis{Prefix: "redisdelay-example-" + name + ":", name: name, keep: keep, logf: logf}
	from := "REDIS_ADDR"
	r.addr = os.Getenv(from)
	if r.addr == "" {
		from = "REDIS_URL"
		r.addr = os.Getenv(from)
	}
	if r.addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("start miniredis: %w", err)
		}
		r.mr, r.Client = mr, redis.NewClient(&redis.Options{Addr: mr.Addr()})
		logf("using embedded miniredis at %s (set REDIS_ADDR to use a real Redis)", mr.Addr())
		return r, nil
	}
	opts := &redis.Options{Addr: r.addr}
	if strings.Contains(r.addr, "://") {
		var err error
		if opts, err = redis.ParseURL(r.addr); err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
	}
	r.Client = redis.NewClient(opts)
	if err := r.Client.Ping(ctx).Err(); err != nil {
		r.Client.Close()
		return nil, fmt.Errorf("redis at %s (%s): %w", r.addr, from, err)
	}
	logf("using Redis at %s (%s), key prefix %s", r.addr, from, r.Prefix)
	n, err := r.deleteKeys(ctx)
	if err != nil {
		r.Client.Close()
		return nil, err
	}
	if n > 0 {
		logf("deleted the %d keys an earlier run kept under %s", n, r.Prefix)
	}
	return r, nil
}

// Close deletes the example's keys unless it was asked to keep them, closes the client (and
// miniredis), and prints to w how to see the example's queues with the redisdelay CLI. It
// gives up on Redis after closeTimeout, also when the example was interrupted.
func (r *Redis) Close(w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	defer r.Client.Close()
	if r.mr != nil {
		defer r.mr.Close()
		fmt.Fprintf(w, "\nThe embedded miniredis ends with the example, so no redisdelay command can see its queues.\n"+
			"To look at them, run the example against a Redis and keep its keys:\n\n"+
			"  REDIS_ADDR=127.0.0.1:6379 go run ./_examples/%s -keep\n", r.name)
		return nil
	}
	if r.keep {
		fmt.Fprintf(w, "\nThe example's keys are kept under %s. To look at them:\n\n%s", r.Prefix, r.commands())
		return nil
	}
	n, err := r.deleteKeys(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nDeleted the example's %d keys under %s. To keep them, run it with -keep, then look at them:\n\n%s", n, r.Prefix, r.commands())
	return nil
}

// commands returns the redisdelay commands that show what the example leaves, each below a
// shell comment that says what it shows: stats first, then those added with Look.
func (r *Redis) commands() string {
	var b strings.Builder
	looks := append([]look{{what: "the counts of every topic and consumer group", args: []string{"stats"}}}, r.looks...)
	for _, l := range looks {
		// --addr and --prefix go after the command's words (such as "schedules list") and
		// before its own flags.
		cmd := 0
		for cmd < len(l.args) && !strings.HasPrefix(l.args[cmd], "-") {
			cmd++
		}
		words := slices.Concat([]string{"redisdelay"}, l.args[:cmd], []string{"--addr", r.addr, "--prefix", r.Prefix}, l.args[cmd:])
		for n, word := range words {
			words[n] = shellQuote(word)
		}
		fmt.Fprintf(&b, "  # %s\n  %s\n", l.what, strings.Join(words, " "))
	}
	return b.String()
}

// LeaveScheduled publishes msg to topic with pub, keyed by key and due after in, so that the
// example leaves a message scheduled in its consumer group for -keep to show, and adds the
// commands that list the group's scheduled messages and show this one by its key (see Look).
// Call it once the example's consumers have stopped, before pub is closed. It returns an error
// naming the key when the publish fails or does not schedule the message.
func (r *Redis) LeaveScheduled(pub *redisdelay.Publisher, topic, group, key string, msg *message.Message, in time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	msg = redisdelay.WithKey(msg, key)
	msg.SetContext(delay.WithContext(ctx, delay.For(in)))
	outcomes, err := pub.PublishWithResult(topic, msg)
	if err != nil {
		return fmt.Errorf("leave %s scheduled on %s: %w", key, topic, err)
	}
	if outcomes[0] != redisdelay.OutcomeScheduled {
		return fmt.Errorf("leave %s scheduled on %s: %s", key, topic, outcomes[0])
	}
	r.logf("left %s on %s, due in %s, for -keep", key, topic, in)
	flags := []string{"--topic", topic, "--group", group}
	r.Look("the message the example left scheduled", slices.Concat([]string{"list"}, flags, []string{"--state", "scheduled"})...)
	r.Look("that message, with its metadata and payload", slices.Concat([]string{"show"}, flags, []string{"--key", key})...)
	return nil
}

// deleteKeys deletes every key under the prefix, scanning 1,000 keys per round trip, and
// returns how many it deleted.
func (r *Redis) deleteKeys(ctx context.Context) (int, error) {
	pattern := globEscape(r.Prefix) + "*"
	deleted := 0
	var cursor uint64
	for {
		keys, next, err := r.Client.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return deleted, fmt.Errorf("scan the keys under %s: %w", r.Prefix, err)
		}
		if len(keys) > 0 {
			n, err := r.Client.Unlink(ctx, keys...).Result()
			if err != nil {
				return deleted, fmt.Errorf("delete the keys under %s: %w", r.Prefix, err)
			}
			deleted += int(n)
		}
		if cursor = next; cursor == 0 {
			return deleted, nil
		}
	}
}

// globEscape escapes the characters SCAN's MATCH pattern treats specially.
func globEscape(s string) string {
	return regexp.MustCompile(`[*?\[\]\\]`).ReplaceAllString(s, `\$0`)
}

// shellQuote returns s as a shell word: as it is when it holds only characters no shell
// treats specially, else in single quotes.
func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9@%+=:,./_-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

package redisdelay_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// isNackScript matches a nack.lua call: the group's due and lease sets, then the topic's
// messages, refs, seq and history keys.
func isNackScript(keys []string) bool {
	return len(keys) == 6 && strings.HasSuffix(keys[1], ":lease") && strings.HasSuffix(keys[4], ":seq")
}

// isClaimScript matches a claim.lua call: its fifth key is the subscription's claim record.
func isClaimScript(keys []string) bool {
	return len(keys) == 12 && strings.Contains(keys[4], ":claim:")
}

// hangUntilCancelled is a scriptFault action for a first call that Redis does not answer until
// the caller gives up: it signals started, and runs the call only if ctx lasts for hang. Later
// calls run at once.
func hangUntilCancelled(started chan<- struct{}, hang time.Duration) func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	var hung atomic.Bool
	return func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if hung.Swap(true) {
			return next(ctx, cmd)
		}
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		case <-time.After(hang):
		}
		return next(ctx, cmd)
	}
}

// TestMessageNackedRightBeforeCloseIsDueAgainAtItsBackoff checks that Close releases a message
// nacked just before it at its nack backoff (at once with ConstantBackoff(0)), not after its
// lease, whether the Nack's call completed, was cut short by Close, or the message was left
// unfinished.
func TestMessageNackedRightBeforeCloseIsDueAgainAtItsBackoff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const lease = 5 * time.Second
		for _, variant := range []string{"nacked", "nack cut short", "unfinished"} {
			t.Run(strings.ReplaceAll(variant, " ", "_"), func(t *testing.T) {
				client := b.client
				if variant == "nack cut short" {
					// A slow nack call: the Close that follows the Nack cancels it before it is sent.
					client = faultyClient(t, b, scriptFault{match: isNackScript, around: hangUntilCancelled(nil, 200*time.Millisecond)})
				}
				logs := newRecordingLogger()
				topic := newTopic()
				first, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, LeaseTimeout: lease, NackBackoff: redisdelay.ConstantBackoff(0)}, logs)
				require.NoError(t, err)
				t.Cleanup(func() { _ = first.Close() })
				ch := subscribe(t, first, topic)
				require.NoError(t, newPublisher(t, b).Publish(topic, message.NewMessage("nacked-before-close", nil)))

				msg := receive(t, ch, 5*time.Second)
				if variant != "unfinished" {
					msg.Nack()
				}
				require.NoError(t, first.Close())
				closed := time.Now()

				second := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = lease })
				again := receive(t, subscribe(t, second, topic), 2*lease)
				took := time.Since(closed)
				assert.Equal(t, msg.UUID, again.UUID)
				assert.Less(t, took, time.Second, "due again at once, not after the %s lease", lease)
				assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptMetadataKey), "the first delivery counts as an attempt")
				again.Ack()
				assert.Empty(t, logs.above(watermill.DebugLogLevel), "a normal Close logs nothing above debug")
			})
		}
	})
}

// TestCloseDuringARedisCallLogsNothingAboveDebug checks that a Close that cancels a claim in
// flight, or a nack in flight, logs nothing above debug level: it is no failure.
func TestCloseDuringARedisCallLogsNothingAboveDebug(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, call := range []string{"claim", "nack"} {
			t.Run(call, func(t *testing.T) {
				started := make(chan struct{}, 1)
				match := isClaimScript
				if call == "nack" {
					match = isNackScript
				}
				client := faultyClient(t, b, scriptFault{match: match, around: hangUntilCancelled(started, time.Minute)})
				logs := newRecordingLogger()
				topic := newTopic()
				sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, NackBackoff: redisdelay.ConstantBackoff(0)}, logs)
				require.NoError(t, err)
				t.Cleanup(func() { _ = sub.Close() })
				ch := subscribe(t, sub, topic)
				if call == "nack" {
					require.NoError(t, newPublisher(t, b).Publish(topic, message.NewMessage("nacked", nil)))
					receive(t, ch, 5*time.Second).Nack()
				}
				select {
				case <-started:
				case <-time.After(5 * time.Second):
					t.Fatalf("no %s call started", call)
				}
				require.NoError(t, sub.Close())
				assert.Empty(t, logs.above(watermill.DebugLogLevel))
			})
		}
	})
}

// recordingLogger records every entry with its level, those of its With loggers too.
type recordingLogger struct {
	*logRecord
	fields watermill.LogFields
}

type logRecord struct {
	mu      sync.Mutex
	entries []logEntry
}

type logEntry struct {
	level  watermill.LogLevel
	msg    string
	err    error
	fields watermill.LogFields
}

func newRecordingLogger() recordingLogger { return recordingLogger{logRecord: &logRecord{}} }

func (l recordingLogger) log(level watermill.LogLevel, msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, logEntry{level: level, msg: msg, err: err, fields: l.fields.Add(fields)})
}

func (l recordingLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.log(watermill.ErrorLogLevel, msg, err, fields)
}
func (l recordingLogger) Info(msg string, fields watermill.LogFields) {
	l.log(watermill.InfoLogLevel, msg, nil, fields)
}
func (l recordingLogger) Debug(msg string, fields watermill.LogFields) {
	l.log(watermill.DebugLogLevel, msg, nil, fields)
}
func (l recordingLogger) Trace(msg string, fields watermill.LogFields) {
	l.log(watermill.TraceLogLevel, msg, nil, fields)
}
func (l recordingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return recordingLogger{logRecord: l.logRecord, fields: l.fields.Add(fields)}
}

// startupNotes are the Info entries a Subscribe may log before anything is delivered.
var startupNotes = []string{"Subscribed", "Redis has no sharded Pub/Sub", "Cannot read maxmemory-policy"}

// above returns the entries above level, but for the startup notes.
func (l recordingLogger) above(level watermill.LogLevel) []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logEntry
	for _, e := range l.entries {
		if e.level > level && !(e.level == watermill.InfoLogLevel && slices.ContainsFunc(startupNotes, func(n string) bool { return strings.HasPrefix(e.msg, n) })) {
			out = append(out, e)
		}
	}
	return out
}

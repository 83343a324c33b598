package redisdelay_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// crashChildEnv makes the test binary act as the consumer that TestConsumerKilledMidMessage
// kills: "<redis address> <topic>".
const crashChildEnv = "REDISDELAY_CRASH_CHILD"

const (
	crashLease    = time.Second
	crashAckFirst = 20
)

// runCrashChild is called by TestMain. In the child process it consumes from the topic, acks
// crashAckFirst messages, then holds the next one unacked and waits to be killed, reporting
// each step on stdout; it never returns. Elsewhere it does nothing.
func runCrashChild() {
	spec := os.Getenv(crashChildEnv)
	if spec == "" {
		return
	}
	addr, topic, _ := strings.Cut(spec, " ")
	client := redis.NewClient(&redis.Options{Addr: addr})
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, LeaseTimeout: crashLease}, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := 0; i < crashAckFirst; i++ {
		msg := <-ch
		msg.Ack()
		fmt.Println("acked", msg.UUID)
	}
	held := <-ch
	fmt.Println("holding", held.UUID)
	fmt.Println("ready")
	select {}
}

func TestConsumerKilledMidMessageLosesNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := backend{name: "redis", client: srv.Client(t)}
	topic := newTopic()
	pub := newPublisher(t, b)
	const count = 200
	var msgs []*message.Message
	for i := 0; i < count; i++ {
		msgs = append(msgs, message.NewMessage(fmt.Sprintf("m%03d", i), nil))
	}
	require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
	require.NoError(t, pub.Publish(topic, msgs...))

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+srv.Addr+" "+topic)
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	acked := map[string]bool{}
	var holding string
	lines := make(chan string)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
		close(lines)
	}()
	deadline := time.After(20 * time.Second)
Reading:
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the child exited early")
			verb, uuid, _ := strings.Cut(line, " ")
			switch verb {
			case "acked":
				acked[uuid] = true
			case "holding":
				holding = uuid
			case "ready":
				break Reading
			default:
				t.Fatalf("child: %s", line)
			}
		case <-deadline:
			t.Fatal("the child did not get ready in 20s")
		}
	}
	require.Len(t, acked, crashAckFirst)
	require.NotEmpty(t, holding)
	// The child's acks are confirmed (Redis holds the rest of the messages only) before it dies.
	due, lease := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
	require.Eventually(t, func() bool {
		ctx := context.Background()
		return b.client.ZCard(ctx, due).Val()+b.client.ZCount(ctx, lease, "-inf", "(1e300").Val() == count-crashAckFirst
	}, 5*time.Second, time.Millisecond, "the child's acks were never confirmed")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	killedAt := time.Now()

	survivor := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = crashLease })
	ch := subscribe(t, survivor, topic)
	received := map[string]string{} // UUID -> attempt
	for len(received) < count-crashAckFirst {
		msg := receive(t, ch, 5*time.Second)
		_, dup := received[msg.UUID]
		require.False(t, dup, "%s delivered twice to the survivor", msg.UUID)
		received[msg.UUID] = msg.Metadata.Get(redisdelay.AttemptMetadataKey)
		if msg.UUID == holding {
			assert.GreaterOrEqual(t, time.Since(killedAt), crashLease/3, "the held message came back before its lease could expire")
		}
		msg.Ack()
	}
	waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)

	lost, duplicated := 0, 0
	for _, m := range msgs {
		_, again := received[m.UUID]
		switch {
		case !again && !acked[m.UUID]:
			lost++
		case again && (acked[m.UUID] || m.UUID == holding):
			duplicated++
		}
	}
	t.Logf("killed holding %s: %d lost, %d delivered twice, %d delivered once by the survivor", holding, lost, duplicated, len(received))
	assert.Zero(t, lost)
	assert.Equal(t, 1, duplicated, "only the message in flight at the kill is delivered twice")
	assert.Equal(t, "2", received[holding])
	for uuid := range acked {
		assert.NotContains(t, received, uuid, "an acked message came back")
	}
}

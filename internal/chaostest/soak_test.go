//go:build chaos

package chaostest

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// consumerChildEnv makes the test binary run as a consumer process of the soak test instead of
// running tests: "<redis address> <topic> <consumer group>".
const consumerChildEnv = "REDISDELAY_CHAOS_CONSUMER"

// childLifetime bounds a consumer process that nobody killed (its parent also kills it through
// Pdeathsig when it dies).
const childLifetime = 10 * time.Minute

// runConsumerChild consumes the topic, printing "got <uuid> <attempt> <unix ns>" for each
// message before acking it, until it is killed; it never returns.
func runConsumerChild(spec string) {
	fields := strings.Fields(spec)
	if len(fields) != 3 {
		fmt.Fprintf(os.Stderr, "chaostest consumer: bad %s=%q\n", consumerChildEnv, spec)
		os.Exit(2)
	}
	time.AfterFunc(childLifetime, func() { os.Exit(3) })
	client := redis.NewClient(&redis.Options{Addr: fields[0]})
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:           client,
		ConsumerGroup:    fields[2],
		LeaseTimeout:     leaseTimeout,
		OperationTimeout: operationTimeout,
		RecheckInterval:  recheckInterval,
		MaxAttempts:      redisdelay.UnlimitedAttempts,
	}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaostest consumer:", err)
		os.Exit(1)
	}
	ch, err := sub.Subscribe(context.Background(), fields[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaostest consumer:", err)
		os.Exit(1)
	}
	for msg := range ch {
		// os.Stdout is unbuffered: a line written before the kill is a line the parent reads.
		fmt.Fprintf(os.Stdout, "got %s %s %d\n", msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), time.Now().UnixNano())
		msg.Ack()
	}
	os.Exit(0)
}

// consumerProcess is a running consumer child whose deliveries go to a ledger.
type consumerProcess struct {
	cmd  *exec.Cmd
	read chan struct{} // closed when its stdout reached EOF
}

func startConsumerProcess(t *testing.T, l *ledger, spec string) *consumerProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), consumerChildEnv+"="+spec)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &consumerProcess{cmd: cmd, read: make(chan struct{})}
	go func() {
		defer close(p.read)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			f := strings.Fields(scanner.Text())
			if len(f) != 4 || f[0] != "got" {
				fmt.Fprintf(os.Stderr, "chaostest: consumer %d said %q\n", cmd.Process.Pid, scanner.Text())
				continue
			}
			ns, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "chaostest: consumer %d said %q\n", cmd.Process.Pid, scanner.Text())
				continue
			}
			l.deliver(f[1], f[2], time.Unix(0, ns))
		}
	}()
	return p
}

// kill sends SIGKILL and waits until every line the process wrote was read.
func (p *consumerProcess) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.read:
	case <-time.After(10 * time.Second):
		t.Errorf("the output of consumer %d did not end within 10s of SIGKILL", p.cmd.Process.Pid)
	}
	_ = p.cmd.Wait()
}

// Scenario 6. Consumer processes are killed with SIGKILL again and again while a publisher keeps
// publishing; a fresh consumer then drains the group.
func TestSoakConsumersKilledRepeatedlyLoseNothing(t *testing.T) {
	const consumers = 2
	duration := short(20*time.Second, 150*time.Second)
	srv := redistest.Start(t, redistest.Options{})
	logger := newLogger(t.Name())
	client := newClient(t, srv.Addr)
	topic, group := newTopic(), "chaos"
	spec := srv.Addr + " " + topic + " " + group

	l := newLedger()
	require.NoError(t, newSubscriber(t, client, group, logger, nil).SubscribeInitialize(topic))
	run := (&load{
		ledger: l, pub: newPublisher(t, client, logger, nil), topic: topic, publishers: 2,
		interval: 10 * time.Millisecond, maxCalls: 2 * int(duration/(10*time.Millisecond)), maxTime: duration,
		payload: make([]byte, 100),
	}).start()

	procs := make([]*consumerProcess, consumers)
	for i := range procs {
		procs[i] = startConsumerProcess(t, l, spec)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				p.kill(t)
			}
		}
	})
	kills := 0
	for end := time.Now().Add(duration); time.Now().Before(end); {
		time.Sleep(time.Duration(300+rand.IntN(600)) * time.Millisecond)
		i := rand.IntN(consumers)
		procs[i].kill(t)
		kills++
		procs[i] = startConsumerProcess(t, l, spec)
	}
	run.halt()
	for _, p := range procs {
		p.kill(t)
	}
	deliveredByChildren := l.summarize().deliveries

	// A fresh consumer drains what is left, including the messages the killed processes held.
	drainer := newSubscriber(t, client, group, logger, nil)
	ch, err := drainer.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); l.consume(ch) }()
	missing := l.waitAllStoredDelivered(drainTimeout)
	require.NoError(t, drainer.Close())
	<-done

	s := l.report(t, "soak-consumers-sigkilled")
	t.Logf("%d consumer processes killed over %s; they delivered %d messages, the drainer %d; %d duplicated deliveries (%.2f per kill)",
		kills, duration, deliveredByChildren, s.deliveries-deliveredByChildren, s.duplicated, float64(s.duplicated)/float64(max(kills, 1)))
	assert.Zero(t, missing, "acknowledged messages still undelivered %s after the soak", drainTimeout)
	assert.Positive(t, kills)
}

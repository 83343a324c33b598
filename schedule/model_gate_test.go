package schedule_test

// The gate of the schedule model test, which stops Schedulers and Subscribers between two
// script calls.

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// smGate lets a test stop Schedulers and Subscribers between two script calls: a call that a
// stop cuts short may still run in Redis after the stop released what it held (a claim whose
// reply is lost), and its lease then expires only when the Redis clock passes it, which
// miniredis's clock does only when the test moves it. Crashes that leave a lease behind are
// TestSchedulersKilledAndRestartedPublishEachTickOnce's, on the real clock.
type smGate struct {
	mu       sync.Mutex
	closed   bool
	inflight int
}

// enter waits while the gate is closed; a call whose context ended is refused.
func (g *smGate) enter(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.mu.Lock()
		if !g.closed {
			g.inflight++
			g.mu.Unlock()
			return nil
		}
		g.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
}

func (g *smGate) leave() {
	g.mu.Lock()
	g.inflight--
	g.mu.Unlock()
}

// stopBetweenCalls closes the gate, waits until no script call is under way, runs cancel, and
// opens the gate: the calls of the cancelled contexts are refused before they are sent.
func (g *smGate) stopBetweenCalls(cancel func()) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	for {
		g.mu.Lock()
		n := g.inflight
		g.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
}

func isScript(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall":
		return true
	}
	return false
}

func (g *smGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *smGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		if err := g.enter(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		defer g.leave()
		return next(ctx, cmd)
	}
}
func (g *smGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.enter(ctx); err != nil {
			return err
		}
		defer g.leave()
		return next(ctx, cmds)
	}
}

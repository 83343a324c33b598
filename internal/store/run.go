package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// run.go owns the one path of every call: the time bound, the script form the server takes,
// the classification of errors, and the reading of reply elements.

// run runs a script: bounded by ctx (see bounded), on the script form the server supports, with
// the error classified (see classify) and named after the script.
func (s Store) run(ctx context.Context, c doer, sc *script, keys []string, args ...any) (any, error) {
	return s.eval(ctx, c, sc, len(keys), append(newCommand(len(args), keys...), args...))
}

// commandHead is how many places an EVAL command has before its keys: the command, the
// script's source or SHA1, and the number of keys.
const commandHead = 3

// newCommand begins an EVAL command for eval: commandHead free places, then keys, with room for
// more places (the script's arguments, or more keys) beyond them.
func newCommand(room int, keys ...string) []any {
	cmd := make([]any, commandHead, commandHead+len(keys)+room)
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return cmd
}

// doer is what runs a command: a go-redis client, or one of its connections.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// eval is run with the command already built (see newCommand): commandHead free places, then
// sc's nkeys keys, then its arguments. It fills the free places, so cmd is used once.
func (s Store) eval(ctx context.Context, c doer, sc *script, nkeys int, cmd []any) (any, error) {
	if err := sc.checkKeys(nkeys); err != nil {
		return nil, err
	}
	cmd[2] = nkeys
	if s.opts.Observe != nil {
		start := time.Now()
		defer func() { s.opts.Observe(sc.name, time.Since(start)) }()
	}
	res, err := bounded(ctx, s.contextTimeouts || s.direct, func(ctx context.Context) (any, error) {
		if !s.shebang.unsupported.Load() {
			res, err := evalForm(ctx, c, sc.flagged, cmd)
			if err == nil || !isShebangRefused(err) {
				return res, err
			}
			s.shebang.unsupported.Store(true)
		}
		return evalForm(ctx, c, sc.plain, cmd)
	})
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", sc.name, classify(err))
	}
	return res, nil
}

// evalForm runs form with cmd's keys and arguments: EVALSHA, then EVAL with the source when
// the server does not hold the script (a NOSCRIPT error), as go-redis's Script.Run does. It
// fills cmd's first two places.
func evalForm(ctx context.Context, c doer, form scriptForm, cmd []any) (any, error) {
	cmd[0], cmd[1] = "evalsha", form.sha
	res, err := c.Do(ctx, cmd...).Result()
	if err != nil && isNoScript(err) {
		cmd[0], cmd[1] = "eval", form.src
		res, err = c.Do(ctx, cmd...).Result()
	}
	return res, err
}

// isNoScript reports the server's NOSCRIPT error (KVRocks puts "ERR " before it).
func isNoScript(err error) bool {
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	return strings.HasPrefix(msg, "NOSCRIPT")
}

// command runs f, one plain command, bounded by ctx, with its error classified.
func command[T any](ctx context.Context, s Store, f func(context.Context) (T, error)) (T, error) {
	v, err := bounded(ctx, s.contextTimeouts, f)
	if err != nil {
		return v, classify(err)
	}
	return v, nil
}

// isShebangRefused reports a compile error at the shebang line, from a server that predates
// script flags.
func isShebangRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "compiling script") && strings.Contains(msg, "'#'")
}

// classify wraps ErrRedisFull around an OOM reply, and ErrOutcomeUnknown around an error after
// which the command may have run: a timeout, a connection lost after sending, or a reply that
// go-redis retries (see retriedReply). Errors that prove the command did not run (any other
// reply error, a refused dial, a closed client or pool) are returned as they are.
func classify(err error) error {
	var reply redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &reply):
		if strings.HasPrefix(reply.Error(), "OOM") {
			return fmt.Errorf("%w: %w", ErrRedisFull, err)
		}
		if retriedReply(err) {
			return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return err
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.As(err, &op) && op.Op == "dial":
		return err
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// retriedReply reports a reply that go-redis answers by trying the command again (LOADING,
// READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, max clients): it may be the reply to a later try
// of a call whose first try was sent on a connection that then broke, and ran. The chaos suite
// saw it: a Redis SIGKILLed under load ran a publish, its AOF kept it, and the try after the
// restart was refused with LOADING.
func retriedReply(err error) bool {
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMaxClientsError(err)
}

// bounded runs f and returns when it does or when ctx is done, whichever comes first.
//
// Why: go-redis honours a context deadline on the socket only when the client has
// ContextTimeoutEnabled; otherwise a call against a server that accepts and never answers
// waits for ReadTimeout (3 s by default) on each of MaxRetries+1 tries. The client is the
// application's, so the adapter cannot turn that option on. When the client has it (direct),
// f runs on the caller's goroutine, and go-redis sets the socket deadlines, the pool wait and
// the retry backoff from ctx, which bounds the call by itself. Otherwise f runs on a goroutine
// of its own and is abandoned at the deadline: it finishes in the background and may still
// take effect, which is safe because every script is atomic (whole or not at all) and the
// publish and claim scripts recognise a second run.
func bounded[T any](ctx context.Context, direct bool, f func(context.Context) (T, error)) (T, error) {
	if direct {
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// unexpected is the error for a reply that a script's wrapper does not know: never a guess.
func unexpected(sc *script, reply any) error {
	return fmt.Errorf("script %s: unexpected reply %v", sc.name, reply)
}

// asInt reads an integer reply element; Redis returns integers as int64 and scores as strings.
func asInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(v, 64)
		return int64(f)
	}
	return 0
}

// asStrings reads an array reply element of strings.
func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

package store

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is a reply error as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// TestClassifyCallsARetriedReplyAnUnknownOutcome: a reply that go-redis answers by trying again
// may follow a first try that ran, so it is ErrOutcomeUnknown; any other reply error proves the
// call did not run; OOM is ErrRedisFull.
func TestClassifyCallsARetriedReplyAnUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		reply         string
		unknown, full bool
	}{
		{"LOADING Redis is loading the dataset in memory", true, false},
		{"READONLY You can't write against a read only replica.", true, false},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true, false},
		{"CLUSTERDOWN The cluster is down", true, false},
		{"TRYAGAIN Multiple keys request during rehashing of slot", true, false},
		{"ERR max number of clients reached", true, false},
		{"OOM command not allowed when used memory > 'maxmemory'.", false, true},
		{"ERR Error running script", false, false},
		{"NOSCRIPT No matching script", false, false},
	} {
		err := classify(replyError(tc.reply))
		if got := errors.Is(err, ErrOutcomeUnknown); got != tc.unknown {
			t.Errorf("%q: ErrOutcomeUnknown %v, want %v (%v)", tc.reply, got, tc.unknown, err)
		}
		if got := errors.Is(err, ErrRedisFull); got != tc.full {
			t.Errorf("%q: ErrRedisFull %v, want %v (%v)", tc.reply, got, tc.full, err)
		}
	}
}

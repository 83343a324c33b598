package redisdelay

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

func TestPublisherForgetsIdleQueuesPastTheBound(t *testing.T) {
	redistest.SkipUnlessLong(t, "10,000 publishes on a miniredis, about 20 s of CPU with -race")
	t.Parallel() // 10,000 publishes on its own miniredis: it runs while other tests wait on time
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	p, err := NewPublisher(PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	data, _ := DefaultMarshalerUnmarshaler{}.Marshal("", message.NewMessage("m", nil))
	for i := range maxQueues + 10 {
		_, err := p.commit(context.Background(), time.Now().Add(time.Minute), store.Partition{Topic: "t" + strconv.Itoa(i)}, []store.Outgoing{{Data: data}}, 0)
		require.NoError(t, err)
	}
	n := 0
	p.queues.Range(func(any, any) bool { n++; return true })
	require.LessOrEqual(t, n, 10, "idle queues are forgotten once there are more than maxQueues")
	require.Equal(t, int64(n), p.queueCount.Load())
}

// TestPublishOptionsAreSettingsOfOneCallOnly: the Scheduler's per-call settings (an absolute due
// time, the key retention with KeepExisting) apply to the messages of that call, and the
// Publisher's config stays as it is for every other call.
func TestPublishOptionsAreSettingsOfOneCallOnly(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // prepare sends nothing
	defer client.Close()
	p, err := NewPublisher(PublisherConfig{Client: client, OnDuplicate: ReplaceExisting, KeyRetention: time.Hour}, nil)
	require.NoError(t, err)
	msgs := func() []*message.Message {
		return []*message.Message{WithKey(message.NewMessage("a", nil), "k"), message.NewMessage("b", nil)}
	}
	at := []time.Time{time.UnixMilli(1_800_000_000_000), time.UnixMilli(1_800_000_001_000)}
	batch, partitions := make([]store.Outgoing, 2), make([]int, 2)
	require.NoError(t, p.prepare("t", msgs(), seam.PublishOptions{At: at, KeyRetention: 3 * time.Second, NotAfterUs: 1}, batch, partitions))
	require.Equal(t, at[0], batch[0].At)
	require.Equal(t, at[1], batch[1].At)
	require.Equal(t, store.KeySpec(store.KeepExisting, 3*time.Second, 0, "k"), batch[0].KeySpec)
	require.Empty(t, batch[1].KeySpec, "a message without a key gets none")

	require.NoError(t, p.prepare("t", msgs(), seam.PublishOptions{}, batch, partitions))
	require.True(t, batch[0].At.IsZero(), "due after its delay metadata")
	require.Equal(t, store.KeySpec(ReplaceExisting.scriptCode(), time.Hour, 0, "k"), batch[0].KeySpec, "the Publisher's own policy and retention")
}

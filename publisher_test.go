package redisdelay

import (
	"context"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

func TestPublisherForgetsIdleQueuesPastTheBound(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	p, err := NewPublisher(PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	data, _ := DefaultMarshalerUnmarshaler{}.Marshal("", message.NewMessage("m", nil))
	for i := range maxQueues + 10 {
		_, err := p.commit(context.Background(), store.Partition{Topic: "t" + strconv.Itoa(i)}, []store.Outgoing{{Data: data}}, 0)
		require.NoError(t, err)
	}
	n := 0
	p.queues.Range(func(any, any) bool { n++; return true })
	require.LessOrEqual(t, n, 10, "idle queues are forgotten once there are more than maxQueues")
	require.Equal(t, int64(n), p.queueCount.Load())
}

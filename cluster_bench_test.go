package redisdelay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// BenchmarkClusterPartitions measures one topic end to end on the shared 3-master Redis
// Cluster: 16 goroutines publish b.N messages, one per Publish, while 4 subscribers of one group
// consume and ack them; ns/op is per message. Compare partitions=1 (the whole topic in one slot,
// one master) with partitions=6 (spread over the masters):
//
//	go test -run '^$' -bench ClusterPartitions -benchtime 200000x
func BenchmarkClusterPartitions(b *testing.B) {
	for _, partitions := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			cluster := sharedCluster(b)
			opts := cluster.ClientOptions()
			opts.PoolSize = 64
			client := redis.NewClusterClient(opts)
			defer client.Close()
			topic := "bench-" + watermill.NewShortUUID()
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Partitions: partitions}, nil)
			require.NoError(b, err)
			var subs []*redisdelay.Subscriber
			for i := 0; i < 4; i++ {
				sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, Partitions: partitions}, nil)
				require.NoError(b, err)
				defer sub.Close()
				subs = append(subs, sub)
			}
			require.NoError(b, subs[0].SubscribeInitialize(topic))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			consumed := make(chan struct{}, 1024)
			for _, sub := range subs {
				ch, err := sub.Subscribe(ctx, topic)
				require.NoError(b, err)
				go func() {
					for msg := range ch {
						msg.Ack()
						consumed <- struct{}{}
					}
				}()
			}
			payload := make([]byte, 100)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + 15) / 16
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := g * per; i < min((g+1)*per, b.N); i++ {
						if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
							b.Error(err)
							return
						}
					}
				}(g)
			}
			for i := 0; i < b.N; i++ {
				<-consumed
			}
			b.StopTimer()
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}

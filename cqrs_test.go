package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type confirmReceipt struct{ OrderID string }

func TestCQRSCommandSentWithADelayArrivesNoEarlier(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		pub := newPublisher(t, b)
		topic := newTopic()
		marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}
		bus, err := cqrs.NewCommandBusWithConfig(pub, cqrs.CommandBusConfig{
			GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return topic, nil },
			Marshaler:            marshaler,
		})
		require.NoError(t, err)
		router, err := message.NewRouter(message.RouterConfig{}, errorLogger{})
		require.NoError(t, err)
		processor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
			GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return topic, nil },
			SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
				return newSubscriber(t, b, inGroup(p.HandlerName)), nil
			},
			Marshaler: marshaler,
		})
		require.NoError(t, err)
		received := make(chan time.Time, 1)
		require.NoError(t, processor.AddHandlers(cqrs.NewCommandHandler("confirm-receipt", func(ctx context.Context, cmd *confirmReceipt) error {
			assert.Equal(t, "order-7", cmd.OrderID)
			received <- time.Now()
			return nil
		})))
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = router.Run(ctx) }()
		<-router.Running()

		sent := time.Now()
		require.NoError(t, bus.Send(delay.WithContext(ctx, delay.For(300*time.Millisecond)), &confirmReceipt{OrderID: "order-7"}))
		select {
		case at := <-received:
			assert.GreaterOrEqual(t, at.Sub(sent), 300*time.Millisecond, "never early")
		case <-time.After(5 * time.Second):
			t.Fatal("the delayed command never arrived")
		}
	})
}

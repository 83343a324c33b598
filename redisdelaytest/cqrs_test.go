package redisdelaytest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

type expireReservation struct{ ID string }

func TestACQRSCommandSentWithADelayIsHandledAtItsVirtualDueTime(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	start := q.Now()
	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}
	topic := func() (string, error) { return "commands", nil }
	bus, err := cqrs.NewCommandBusWithConfig(q.Publisher(), cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return topic() },
		Marshaler:            marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	processor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return topic() },
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return q.Subscriber(p.HandlerName), nil
		},
		Marshaler: marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handledAt []time.Time
	err = processor.AddHandlers(cqrs.NewCommandHandler("expire-reservation", func(ctx context.Context, cmd *expireReservation) error {
		mu.Lock()
		defer mu.Unlock()
		handledAt = append(handledAt, q.Now())
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	if err := bus.Send(delay.WithContext(ctx, delay.For(48*time.Hour)), &expireReservation{ID: "r-1"}); err != nil {
		t.Fatal(err)
	}
	q.Advance(48*time.Hour - time.Microsecond)
	mu.Lock()
	early := len(handledAt)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("the command was handled before its due time")
	}
	q.Advance(time.Microsecond)
	mu.Lock()
	defer mu.Unlock()
	if len(handledAt) != 1 || !handledAt[0].Equal(start.Add(48*time.Hour)) {
		t.Fatalf("handled at %v, want once at %s", handledAt, start.Add(48*time.Hour))
	}
}

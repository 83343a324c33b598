package redisdelay_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
)

// exampleRedis starts an embedded miniredis and returns a client of it, and a function that
// closes both. The examples run against it; in production the client is your Redis.
func exampleRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return client, func() { client.Close(); mr.Close() }
}

// exampleReceive waits up to 5 s for the next message of ch.
func exampleReceive(ch <-chan *message.Message) *message.Message {
	select {
	case msg := <-ch:
		return msg
	case <-time.After(5 * time.Second):
		log.Fatal("no message within 5s")
		return nil
	}
}

func ExamplePublisher_Publish() {
	client, closeRedis := exampleRedis()
	defer closeRedis()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "reminders"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "reminder.send")
	if err != nil {
		log.Fatal(err)
	}

	// Due 200 ms after Publish. delay.Message(msg, delay.For(...)) works too.
	msg := message.NewMessage(watermill.NewUUID(), []byte("call the customer back"))
	msg.SetContext(delay.WithContext(context.Background(), delay.For(200*time.Millisecond)))
	published := time.Now()
	if err := pub.Publish("reminder.send", msg); err != nil {
		log.Fatal(err)
	}

	got := exampleReceive(ch)
	fmt.Printf("%s (after its delay: %t)\n", got.Payload, time.Since(published) >= 200*time.Millisecond)
	got.Ack()
	// Output: call the customer back (after its delay: true)
}

func ExampleSubscriber_Subscribe() {
	client, closeRedis := exampleRedis()
	defer closeRedis()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	// Every consumer group registered on a topic gets every message (fan-out); the
	// subscribers of one group compete for its messages.
	var channels []<-chan *message.Message
	for _, group := range []string{"billing", "shipping"} {
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: group}, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer sub.Close()
		ch, err := sub.Subscribe(context.Background(), "order.placed")
		if err != nil {
			log.Fatal(err)
		}
		channels = append(channels, ch)
	}

	if err := pub.Publish("order.placed", message.NewMessage(watermill.NewUUID(), []byte("order 42"))); err != nil {
		log.Fatal(err)
	}
	for i, group := range []string{"billing", "shipping"} {
		msg := exampleReceive(channels[i])
		fmt.Printf("%s: %s, attempt %s\n", group, msg.Payload, msg.Metadata.Get(redisdelay.AttemptMetadataKey))
		msg.Ack() // Nack instead would deliver it again to this group, after the NackBackoff
	}
	// Output:
	// billing: order 42, attempt 1
	// shipping: order 42, attempt 1
}

func ExampleWithKey() {
	client, closeRedis := exampleRedis()
	defer closeRedis()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "order-service"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	// Register the group, so that it keeps every message published from now on.
	if err := sub.SubscribeInitialize("order.payment-check"); err != nil {
		log.Fatal(err)
	}

	// Check in 30 minutes whether order 42 was paid; the key names the check on the topic.
	msg := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), []byte("42")), "order-42")
	msg.SetContext(delay.WithContext(context.Background(), delay.For(30*time.Minute)))
	outcomes, err := pub.PublishWithResult("order.payment-check", msg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("publish:", outcomes[0])

	// The order was paid: call the check off by its key.
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := in.Cancel(context.Background(), "order.payment-check", redisdelay.ByKey("order-42"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancel in group order-service:", res.Groups["order-service"])
	// Output:
	// publish: scheduled
	// cancel in group order-service: applied
}

func ExampleDefaultDeadLetterTopic() {
	client, closeRedis := exampleRedis()
	defer closeRedis()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	// One attempt only: a message nacked once becomes a dead letter.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "billing", MaxAttempts: 1}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	// Dead letters are ordinary messages on their topic, consumed by a group of their own.
	deadLetterTopic := redisdelay.DefaultDeadLetterTopic("invoice.send", "billing")
	deadLetters, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "ops"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer deadLetters.Close()
	ch, err := sub.Subscribe(context.Background(), "invoice.send")
	if err != nil {
		log.Fatal(err)
	}
	dlq, err := deadLetters.Subscribe(context.Background(), deadLetterTopic)
	if err != nil {
		log.Fatal(err)
	}

	if err := pub.Publish("invoice.send", message.NewMessage(watermill.NewUUID(), []byte("invoice 7"))); err != nil {
		log.Fatal(err)
	}
	exampleReceive(ch).Nack()

	dead := exampleReceive(dlq)
	fmt.Println("topic:", deadLetterTopic)
	fmt.Println("payload:", string(dead.Payload))
	fmt.Println("reason:", dead.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
	fmt.Println("attempts:", dead.Metadata.Get(redisdelay.DeadLetterAttemptsMetadataKey))
	dead.Ack()
	// Output:
	// topic: invoice.send.dead-letter.billing
	// payload: invoice 7
	// reason: nacked
	// attempts: 1
}

func ExampleInspector_Stats() {
	client, closeRedis := exampleRedis()
	defer closeRedis()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "mailer"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("email.send"); err != nil {
		log.Fatal(err)
	}

	// Two emails due in an hour, one due now; nobody consumes them yet.
	for _, d := range []time.Duration{time.Hour, time.Hour, 0} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		delay.Message(msg, delay.For(d))
		if err := pub.Publish("email.send", msg); err != nil {
			log.Fatal(err)
		}
	}

	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	if err != nil {
		log.Fatal(err)
	}
	stats, err := in.Stats(context.Background(), "email.send")
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range stats {
		fmt.Printf("%s/%s: scheduled %d, due %d, in flight %d, dead letters %d\n",
			s.Topic, s.Group, s.Scheduled, s.Due, s.InFlight, s.DeadLetters)
	}
	// Output: email.send/mailer: scheduled 2, due 1, in flight 0, dead letters 0
}

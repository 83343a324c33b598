package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
)

// outbox.go is the transactional outbox itself, which the example and its test share: the
// application's transaction writes its rows and an enveloped message into PostgreSQL through
// watermill-sql's publisher, and Watermill's forwarder moves committed messages to
// redisdelay. None of it is code of this repository's own: only the wiring.

const (
	// outboxTopic is the watermill-sql topic (a table) the forwarder reads.
	outboxTopic = "redisdelay_outbox"
	// forwarderGroup is the watermill-sql consumer group of the forwarder: its offsets say
	// which outbox rows were forwarded.
	forwarderGroup = "redisdelay-forwarder"
	// checkTopic is the redisdelay topic of the payment checks.
	checkTopic = "order.payment-check"
)

// initSchema creates the orders table and the outbox's tables, outside any transaction
// (watermill-sql refuses to create tables inside one: CREATE TABLE would commit it).
func initSchema(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id TEXT PRIMARY KEY,
		placed_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create the orders table: %w", err)
	}
	sub, err := newOutboxSubscriber(db, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(outboxTopic); err != nil {
		return fmt.Errorf("create the outbox tables: %w", err)
	}
	return nil
}

// newOutboxSubscriber returns the watermill-sql subscriber that the forwarder reads the outbox
// with. It polls every 100 ms when the outbox is empty (watermill-sql's default is 1 s), which
// bounds the latency the hop adds.
func newOutboxSubscriber(db *sql.DB, logger watermill.LoggerAdapter) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
		ConsumerGroup:  forwarderGroup,
		SchemaAdapter:  wmsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:   100 * time.Millisecond,
		ResendInterval: 100 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
	}, logger)
}

// newForwarder returns Watermill's forwarder from the outbox to out, a redisdelay.Publisher
// (or a decorator of one). Run it with Run; Close stops it and closes its SQL subscriber, not
// out.
func newForwarder(db *sql.DB, out message.Publisher, logger watermill.LoggerAdapter) (*forwarder.Forwarder, error) {
	sub, err := newOutboxSubscriber(db, logger)
	if err != nil {
		return nil, err
	}
	return forwarder.NewForwarder(sub, out, logger, forwarder.Config{
		ForwarderTopic: outboxTopic,
		CloseTimeout:   5 * time.Second,
	})
}

// outboxPublisher returns a publisher that writes messages into the outbox within tx: they
// reach redisdelay once tx commits, and never if it rolls back.
func outboxPublisher(tx *sql.Tx) (message.Publisher, error) {
	pub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{
		SchemaAdapter: wmsql.DefaultPostgreSQLSchema{},
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: outboxTopic}), nil
}

// paymentCheck is the message that checks, d after the order, whether order id was paid. Its
// key makes the outbox's re-sends harmless: the forwarder sends a message again when it
// crashed before marking it forwarded, and redisdelay keeps the first copy (KeepExisting).
// The delay goes in metadata (delay.Message), since the outbox carries metadata but not the
// context that delay.WithContext would use.
func paymentCheck(id string, d time.Duration) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"`+id+`"}`))
	redisdelay.WithKey(msg, "order-"+id)
	delay.Message(msg, delay.For(d))
	return msg
}

// placeOrder inserts order id and schedules its payment check, d later, in one transaction.
// With commit false the transaction rolls back at the end, as when a later step fails: neither
// the order nor its check exists then. It returns when the transaction began.
func placeOrder(ctx context.Context, db *sql.DB, id string, d time.Duration, commit bool) (time.Time, error) {
	began := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return began, err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
		return began, fmt.Errorf("insert order %s: %w", id, err)
	}
	pub, err := outboxPublisher(tx)
	if err != nil {
		return began, err
	}
	if err := pub.Publish(checkTopic, paymentCheck(id, d)); err != nil {
		return began, fmt.Errorf("schedule the payment check of order %s: %w", id, err)
	}
	if !commit {
		return began, tx.Rollback()
	}
	return began, tx.Commit()
}

// outboxRows counts the messages ever written to the outbox.
func outboxRows(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	table := wmsql.DefaultPostgreSQLSchema{}.MessagesTable(outboxTopic)
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n)
	return n, err
}

package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

// BenchmarkOverview1000Topics renders the first page of the overview of 1,000 topics with two
// consumer groups each (a page of 50 topics, 100 rows) from a throw-away redis-server; the
// target is 200 ms per page.
func BenchmarkOverview1000Topics(b *testing.B) {
	const topics = 1000
	q := newQueue(b)
	groups := []string{"billing", "shipping"}
	for _, group := range groups {
		sub := q.subscriber(group, 0)
		require.NoError(b, parallel(topics, func(n int) error { return sub.SubscribeInitialize("topic-" + strconv.Itoa(n)) }))
	}
	require.NoError(b, parallel(topics, func(n int) error {
		now := message.NewMessage("now-"+strconv.Itoa(n), []byte("due now"))
		later := message.NewMessage("later-"+strconv.Itoa(n), []byte("due in an hour"))
		delay.Message(later, delay.For(time.Hour))
		return q.pub.Publish("topic-"+strconv.Itoa(n), now, later)
	}))
	st, err := q.in.Stats(context.Background())
	require.NoError(b, err)
	require.Len(b, st, topics*len(groups))

	h, err := dashboard.New(q.in, dashboard.Options{Lateness: latenessFunc(func(string, string) (time.Duration, time.Duration, bool) {
		return time.Millisecond, 10 * time.Millisecond, true
	})})
	require.NoError(b, err)
	// httptest's default host, example.com, is not one the dashboard serves (AllowedHosts).
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	b.ResetTimer()
	for range b.N {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || strings.Count(rec.Body.String(), "<tr data-topic=") != 50*len(groups) {
			b.Fatalf("overview: status %d, %d rows", rec.Code, strings.Count(rec.Body.String(), "<tr data-topic="))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/op")

	// For comparison, what a view cost before the overview had pages: Stats of every topic.
	b.StopTimer()
	start := time.Now()
	for range b.N {
		_, err := q.in.Stats(context.Background())
		require.NoError(b, err)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1e3/float64(b.N), "stats-ms/op")
}

// parallel calls f for 0..n-1, 16 at a time, and returns the first error.
func parallel(n int, f func(i int) error) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- f(i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

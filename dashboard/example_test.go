package dashboard_test

import (
	"crypto/subtle"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

// The dashboard mounted under /queues of an operator's server, with actions for those who
// give the operator password, and lateness from the Metrics of the subscribers that run in
// the same process.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	metrics, err := redisdelay.NewMetrics(redisdelay.MetricsConfig{})
	if err != nil {
		log.Fatal(err)
	}
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, Metrics: metrics}, nil)
	if err != nil {
		log.Fatal(err)
	}
	h, err := dashboard.New(in, dashboard.Options{
		Prefix:       "/queues",
		AllowActions: true,
		Authorize: func(r *http.Request) bool {
			_, password, ok := r.BasicAuth()
			return ok && subtle.ConstantTimeCompare([]byte(password), []byte("operator password")) == 1
		},
		Lateness: metrics.Lateness,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/queues/", h)
	log.Fatal(http.ListenAndServe(":8080", mux))
}

package dashboard_test

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/metrics"
)

// The dashboard mounted under /queues of an operator's server, reached as
// queues.internal:8080, behind a password that a browser asks for (see basicAuth), with
// lateness from the Metrics of the subscribers that run in the same process.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		log.Fatal(err)
	}
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, Metrics: m}, nil)
	if err != nil {
		log.Fatal(err)
	}
	h, err := dashboard.New(in, dashboard.Options{
		Prefix:       "/queues",
		AllowActions: true,
		AllowedHosts: []string{"queues.internal"},
		Authenticate: basicAuth("operator", "operator password"),
		Lateness:     m,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/queues/", h)
	log.Fatal(http.ListenAndServe(":8080", mux))
}

// basicAuth returns an Options.Authenticate that lets in requests with the user name and
// password, and answers every other one with 401 Unauthorized and a Basic challenge, upon
// which a browser asks for them (and then sends them with every request). Use it over HTTPS
// only: Basic authentication sends the password in clear.
func basicAuth(user, password string) func(w http.ResponseWriter, r *http.Request) bool {
	// Comparing hashes takes the same time whatever the lengths.
	wantUser, wantPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(w http.ResponseWriter, r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		gotUser, gotPassword := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if ok && subtle.ConstantTimeCompare(gotUser[:], wantUser[:])&subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:]) == 1 {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="queues", charset="UTF-8"`)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return false
	}
}

// A browser that opens the dashboard without credentials gets a Basic challenge, and the
// pages once it gives them.
func ExampleOptions_authenticate() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: redis.NewClient(&redis.Options{Addr: mr.Addr()})}, nil)
	if err != nil {
		log.Fatal(err)
	}
	h, err := dashboard.New(in, dashboard.Options{Prefix: "/queues", Authenticate: basicAuth("operator", "s3cret")})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, login := range [][2]string{{}, {"operator", "wrong"}, {"operator", "s3cret"}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/queues/", nil)
		if login[0] != "" {
			req.SetBasicAuth(login[0], login[1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		_ = res.Body.Close()
		fmt.Println(res.Status, res.Header.Get("WWW-Authenticate"))
	}
	// Output:
	// 401 Unauthorized Basic realm="queues", charset="UTF-8"
	// 401 Unauthorized Basic realm="queues", charset="UTF-8"
	// 200 OK
}

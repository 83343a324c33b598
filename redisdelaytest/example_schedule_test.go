package redisdelaytest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// A daily schedule tested in virtual time: a Scheduler made on the kit's Publisher runs as in
// production (go sched.Run), and Advance drives it, so 48 virtual hours publish the report
// twice, each at 06:00, in a fraction of a second. In a test, pass the *testing.T to
// redisdelaytest.New.
func Example_schedule() {
	t := &exampleT{}
	defer t.done()

	q := redisdelaytest.New(t, redisdelaytest.Options{}) // the clock starts at 2030-01-01 00:00 UTC
	q.Consume("reports.build", "reporting")

	sched, _ := schedule.New(schedule.Config{Publisher: q.Publisher()}, nil)
	defer sched.Close()
	_, _ = sched.Put(context.Background(), schedule.Schedule{
		Name: "daily-report", Spec: "0 6 * * *", Topic: "reports.build",
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = sched.Run(ctx) }()

	q.Advance(48 * time.Hour)
	for _, d := range q.Received("reporting") {
		fmt.Println("report", d.Key, "handed out at", d.At.Format(time.RFC3339))
	}
	// Output:
	// report daily-report@2030-01-01T06:00:00.000Z handed out at 2030-01-01T06:00:00Z
	// report daily-report@2030-01-02T06:00:00.000Z handed out at 2030-01-02T06:00:00Z
}

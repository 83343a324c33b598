package browsertest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// RequireEnv is the environment variable that turns a missing Chromium into a failure.
const RequireEnv = "REDISDELAY_REQUIRE_BROWSER"

// ArtifactsEnv names the folder for screenshots; testdata/artifacts when it is empty.
const ArtifactsEnv = "REDISDELAY_ARTIFACTS"

// runTimeout bounds each test's whole browser session, start-up included.
const runTimeout = 60 * time.Second

// chromiumPath returns the Chromium to drive, skipping t when there is none, or failing it
// when RequireEnv is set.
func chromiumPath(t *testing.T) string {
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("Chromium is not installed (/usr/bin/chromium) and %s is set", RequireEnv)
	}
	t.Skipf("Chromium is not installed; install it (apt-get install chromium) or set %s=1 to make this a failure", RequireEnv)
	return ""
}

// console records what the page writes to the console, its uncaught exceptions, the
// browser's log entries, which is where Chromium reports Content-Security-Policy violations,
// and the dialogs it opens.
type console struct {
	mu    sync.Mutex
	lines []string
}

// record is a chromedp.Listen func: it runs on the tab's reader, so it only appends.
func (c *console) record(ev any) {
	var line string
	switch ev := ev.(type) {
	case *log.EventEntryAdded:
		line = fmt.Sprintf("log %s %s: %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text)
	case *runtime.EventConsoleAPICalled:
		var args []string
		for _, a := range ev.Args {
			args = append(args, strings.TrimSpace(string(a.Value)+" "+a.Description))
		}
		line = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
	case *page.EventJavascriptDialogOpening:
		line = "dialog: " + ev.Message
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		line = "exception: " + d.Text
		if d.Exception != nil {
			line += " " + d.Exception.Description
		}
	default:
		return
	}
	c.mu.Lock()
	c.lines = append(c.lines, line)
	c.mu.Unlock()
}

// matching returns the recorded lines that contain any of parts.
func (c *console) matching(parts ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.lines {
		for _, p := range parts {
			if strings.Contains(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// browser starts a headless Chromium for t, with a console recorder on its tab; the whole
// session ends after runTimeout or with the test.
func browser(t *testing.T) (context.Context, *console) {
	path := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	c := &console{}
	require.NoError(t, chromedp.Listen(ctx, c.record), "start Chromium")
	// Confirm dialogs (hx-confirm) would block the page: accept each.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return ctx, c
}

// noViolations fails t on any Content-Security-Policy report or uncaught exception so far.
// The recorder sees every event the browser sent before the reply to a command, so one
// command first makes "so far" include everything the page did before this call.
func noViolations(t *testing.T, ctx context.Context, c *console) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Evaluate[int](`1`))
	require.NoError(t, err)
	assert.Empty(t, c.matching("Content Security Policy", "Content-Security-Policy"), "CSP violations")
	assert.Empty(t, c.matching("exception: "), "uncaught exceptions")
}

// artifacts returns the folder for screenshots: $REDISDELAY_ARTIFACTS, or testdata/artifacts.
func artifacts(t *testing.T) string {
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		var err error
		dir, err = filepath.Abs(filepath.Join("testdata", "artifacts"))
		require.NoError(t, err)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// screenshot saves the whole page as name.png in the artifacts folder.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "screenshot %s is a PNG", name)
	path := filepath.Join(artifacts(t), name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s", path)
}

// text returns the text of the first element that sel (CSS) matches, once it is visible.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))), "wait for %s", sel)
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, "text of %s", sel)
	return strings.TrimSpace(s)
}

// seeded is a redis-server with known queues:
//
//	orders, groups billing and shipping: 8 scheduled (5 plain, 3 keyed order-1..3), 2 due
//	emails, group sender: 3 dead letters (bounce(0..2), nacked after 1 attempt)
type seeded struct {
	in  *redisdelay.Inspector
	pub *redisdelay.Publisher
}

func seed(t *testing.T) seeded {
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	require.NoError(t, err)
	subscriber := func(group string, maxAttempts int) *redisdelay.Subscriber {
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
			Client: client, ConsumerGroup: group, MaxAttempts: maxAttempts, NackBackoff: redisdelay.ConstantBackoff(0),
		}, nil)
		require.NoError(t, err)
		return sub
	}

	for _, g := range []string{"billing", "shipping"} {
		sub := subscriber(g, 0)
		require.NoError(t, sub.SubscribeInitialize("orders"))
		require.NoError(t, sub.Close())
	}
	var msgs []*message.Message
	for i := range 5 {
		msg := message.NewMessage("later-"+strconv.Itoa(i), []byte(`{"reminder":`+strconv.Itoa(i)+`}`))
		delay.Message(msg, delay.For(time.Hour))
		msgs = append(msgs, msg)
	}
	for i := 1; i <= 3; i++ {
		msg := message.NewMessage("order-uuid-"+strconv.Itoa(i), []byte(`{"order":`+strconv.Itoa(i)+`,"status":"unpaid"}`))
		delay.Message(msg, delay.For(2*time.Hour))
		msgs = append(msgs, redisdelay.WithKey(msg, "order-"+strconv.Itoa(i)))
	}
	msgs = append(msgs, message.NewMessage("now-1", []byte("due now")), message.NewMessage("now-2", []byte("due now too")))
	require.NoError(t, pub.Publish("orders", msgs...))

	sender := subscriber("sender", 1)
	ch, err := sender.Subscribe(context.Background(), "emails")
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, pub.Publish("emails", message.NewMessage("bounce-"+strconv.Itoa(i), []byte(bounce(i)))))
	}
	for range 3 {
		select {
		case msg := <-ch:
			msg.Nack()
		case <-time.After(10 * time.Second):
			t.Fatal("no message on emails to nack")
		}
	}
	require.Eventually(t, func() bool { return stats(t, in, "emails", "sender").DeadLetters == 3 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, sender.Close())
	return seeded{in: in, pub: pub}
}

// bounce is the payload of the i-th message of emails, longer than a preview.
func bounce(i int) string {
	return fmt.Sprintf(`{"to":"customer-%d@example.com","subject":"Your order has shipped","bounced mail":"550 5.1.1 mailbox unavailable"}`, i)
}

func stats(t *testing.T, in *redisdelay.Inspector, topic, group string) redisdelay.GroupStats {
	all, err := in.Stats(context.Background(), topic)
	require.NoError(t, err)
	for _, st := range all {
		if st.Group == group {
			return st
		}
	}
	t.Fatalf("no group %s on topic %s", group, topic)
	return redisdelay.GroupStats{}
}

// serve starts the dashboard over HTTP for the test.
func serve(t *testing.T, in *redisdelay.Inspector, opts dashboard.Options) *httptest.Server {
	h, err := dashboard.New(in, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestOperatorSeesTheCountsOpensAMessageAndCancelsIt(t *testing.T) {
	q := seed(t)
	srv := serve(t, q.in, dashboard.Options{Prefix: "/queues", AllowActions: true})
	ctx, c := browser(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/queues/")))
	version, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.htmx ? htmx.version : "not loaded"`))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(version, "2."), "htmx %s runs under the policy", version)
	row := func(topic, group, stat string) string {
		return text(t, ctx, fmt.Sprintf(`tr[data-topic=%q][data-group=%q] td[data-stat=%q]`, topic, group, stat))
	}
	for _, g := range []string{"billing", "shipping"} {
		assert.Equal(t, "8", row("orders", g, "scheduled"), g)
		assert.Equal(t, "2", row("orders", g, "due"), g)
		assert.Equal(t, "0", row("orders", g, "in-flight"), g)
		assert.Equal(t, "0", row("orders", g, "dead"), g)
	}
	assert.Equal(t, "3", row("emails", "sender", "dead"))
	assert.Equal(t, "0", row("emails", "sender", "scheduled"))
	screenshot(t, ctx, "overview")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-topic="orders"][data-group="billing"] a`))))
	assert.Equal(t, "Scheduled 8", text(t, ctx, `nav.tabs a.active`))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#messages tbody tr").length`))
	require.NoError(t, err)
	assert.Equal(t, 8, rows)
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, srv.URL+"/queues/topic/orders/group/billing", location)
	screenshot(t, ctx, "group")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-id$="=order-2"] a`))))
	assert.Equal(t, "{\n  \"order\": 2,\n  \"status\": \"unpaid\"\n}", text(t, ctx, "#payload"))
	assert.Equal(t, "scheduled", text(t, ctx, "#state"))
	assert.Equal(t, "JSON", text(t, ctx, "#payload-kind"))
	screenshot(t, ctx, "message")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-action="cancel"]`))))
	assert.Equal(t, "The message was cancelled.", text(t, ctx, "p.notice"))
	assert.Len(t, c.matching("dialog: Cancel this message in group billing?"), 1, "htmx asked to confirm")
	status, err := q.in.Status(context.Background(), "orders", redisdelay.ByKey("order-2"))
	require.NoError(t, err)
	assert.Equal(t, redisdelay.StateFinished, status.Groups["billing"].State, "billing no longer holds order-2")
	assert.Equal(t, redisdelay.StateScheduled, status.Groups["shipping"].State, "cancel by ref acts on one group")
	assert.Equal(t, int64(7), stats(t, q.in, "orders", "billing").Scheduled)
	assert.Equal(t, int64(8), stats(t, q.in, "orders", "shipping").Scheduled)

	// The dead letters are there too, each with its page.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/queues/topic/emails/group/sender?state=dead-lettered")))
	assert.Equal(t, "Dead letters 3", text(t, ctx, `nav.tabs a.active`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#messages tbody tr a`))))
	assert.Equal(t, "dead letter", text(t, ctx, "#state"))
	assert.Contains(t, text(t, ctx, "#payload"), "bounced mail")
	screenshot(t, ctx, "dead-letter")

	noViolations(t, ctx, c)
}

func TestReadOnlyDashboardOffersNoActionsAndRefusesPosts(t *testing.T) {
	q := seed(t)
	srv := serve(t, q.in, dashboard.Options{})
	ctx, c := browser(t)
	page, err := q.in.List(context.Background(), "orders", "billing", redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	ref := page.Messages[0].Ref

	actions := `document.querySelectorAll('form[method="post"], button[data-action]').length`
	for _, u := range []string{
		"/", "/topic/orders/group/billing",
		"/topic/orders/group/billing/message?ref=" + url.QueryEscape(ref),
		"/topic/emails/group/sender?state=dead-lettered",
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+u), chromedp.WaitVisible(chromedp.CSS("main"))))
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](actions))
		require.NoError(t, err)
		assert.Zero(t, n, "action forms on %s", u)
	}
	assert.NotEmpty(t, text(t, ctx, "#messages"), "the read-only pages still list messages")
	screenshot(t, ctx, "read-only-group")

	// A POST from the page itself (same origin) is refused all the same.
	for _, action := range []string{"/message/cancel", "/message/run-now", "/pause"} {
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
			fmt.Sprintf(`fetch(%q, {method: "POST"}).then(r => r.status)`, "/topic/orders/group/billing"+action+"?ref="+url.QueryEscape(ref)),
			chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		assert.Equal(t, http.StatusForbidden, status, action)
	}
	st := stats(t, q.in, "orders", "billing")
	assert.Equal(t, int64(8), st.Scheduled)
	assert.False(t, st.Paused)

	noViolations(t, ctx, c)
}

// TestConsoleRecorderCatchesCSPViolations makes sure that noViolations could fail: a page
// with an inline script and an inline style under the dashboard's policy is reported.
func TestConsoleRecorderCatchesCSPViolations(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", dashboard.ContentSecurityPolicy)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>bad</title><main><p id="p" style="color: red">inline</p><script>document.title = "ran"</script></main>`))
	}))
	t.Cleanup(bad.Close)
	ctx, c := browser(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(bad.URL), chromedp.WaitVisible(chromedp.CSS("#p"))))
	title, err := chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	assert.Equal(t, "bad", title, "the inline script was blocked")
	violations := c.matching("Content Security Policy")
	assert.NotEmpty(t, violations, "recorded: %v", c.matching(""))
	for _, v := range violations {
		t.Log(v)
	}
}

// style returns the computed value of a CSS property of the first element sel matches.
func style(t *testing.T, ctx context.Context, sel, property string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`getComputedStyle(document.querySelector(%q)).getPropertyValue(%q)`, sel, property)))
	require.NoError(t, err, "style of %s", sel)
	return v
}

// The colours of dashboard.css: amber (a warning) and red (an alarm) backgrounds.
const (
	warnBackground  = "rgb(255, 233, 194)"
	alarmBackground = "rgb(192, 38, 26)"
)

func TestOperatorSeesWarningsAndAlarmsAndTheRefreshedCounts(t *testing.T) {
	q := seed(t)
	require.NoError(t, q.in.Pause(context.Background(), "orders", "shipping"))
	srv := serve(t, q.in, dashboard.Options{
		RefreshInterval: 200 * time.Millisecond,
		Thresholds:      dashboard.Thresholds{OverdueWarning: time.Microsecond, OverdueAlarm: time.Hour, DeadLettersAlarm: 3},
	})
	ctx, c := browser(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")))
	cellOf := func(topic, group, stat string) string {
		return fmt.Sprintf(`tr[data-topic=%q][data-group=%q] td[data-stat=%q]`, topic, group, stat)
	}
	assert.Equal(t, "3", text(t, ctx, cellOf("emails", "sender", "dead")))
	assert.Equal(t, alarmBackground, style(t, ctx, cellOf("emails", "sender", "dead"), "background-color"), "3 dead letters: an alarm")
	assert.Equal(t, warnBackground, style(t, ctx, cellOf("orders", "billing", "oldest-due"), "background-color"), "due messages waited: a warning")
	assert.Equal(t, warnBackground, style(t, ctx, cellOf("orders", "shipping", "paused")+" .badge", "background-color"), "paused: a warning")
	assert.Equal(t, "rgba(0, 0, 0, 0)", style(t, ctx, cellOf("orders", "billing", "scheduled"), "background-color"), "no colour")
	assert.Contains(t, text(t, ctx, "#source"), "key prefix "+redisdelay.DefaultKeyPrefix)
	screenshot(t, ctx, "overview-warnings")

	// The counts refresh by themselves: a message published now shows within a few polls.
	require.NoError(t, q.pub.Publish("orders", message.NewMessage("fresh", []byte("new"))))
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](
		fmt.Sprintf(`document.querySelector(%q).textContent === "3"`, cellOf("orders", "billing", "due")),
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the due count refreshed to 3")
	assert.Contains(t, text(t, ctx, "#updated"), "refreshes every 200ms")

	// Pausing stops the polling; resuming starts it again.
	// The links navigate: wait for the new page's link before reading its line.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[data-refresh="pause"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`a[data-refresh="resume"]`)))
	assert.Contains(t, text(t, ctx, "#updated"), "auto-refresh paused")
	polls, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("[hx-trigger]").length`))
	require.NoError(t, err)
	assert.Zero(t, polls, "nothing polls while paused")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[data-refresh="resume"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`a[data-refresh="pause"]`)))
	assert.Contains(t, text(t, ctx, "#updated"), "refreshes every")

	// The group page repeats the colours on its tabs and says what needs attention. It
	// refreshes every 200 ms, swapping its content: a read between two swaps can find an
	// element on its way out, so these wait for the state instead of reading it once.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/topic/emails/group/sender?state=dead-lettered")))
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](
		fmt.Sprintf(`getComputedStyle(document.querySelector("nav.tabs a.active .count")).backgroundColor === %q`, alarmBackground),
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the dead-lettered tab's count is red")
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](
		`(document.querySelector("#dead-letters")?.textContent ?? "").includes("3 dead letters wait on emails.dead-letter.sender")`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the group page says that 3 dead letters wait")
	noViolations(t, ctx, c)
}

func TestOperatorReadsADeadLetterInFullFromItsRow(t *testing.T) {
	q := seed(t)
	srv := serve(t, q.in, dashboard.Options{AllowActions: true})
	ctx, c := browser(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/topic/emails/group/sender?state=dead-lettered")))
	assert.Equal(t, "Dead letters 3", text(t, ctx, `nav.tabs a.active`))
	assert.Equal(t, "nacked", text(t, ctx, `#messages tbody tr td[data-field="reason"]`))
	// A row stays one line high, however long its cells.
	heights, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[...document.querySelectorAll("#messages tbody tr")].map(r => r.getBoundingClientRect().height)`))
	require.NoError(t, err)
	for _, h := range heights {
		assert.Less(t, h, 40.0, "a row that wraps is taller")
	}
	screenshot(t, ctx, "dead-letters")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#messages tbody tr a`))))
	assert.Equal(t, "dead letter", text(t, ctx, "#state"))
	assert.Equal(t, "nacked", text(t, ctx, "#reason"))
	assert.Equal(t, "1", text(t, ctx, "#attempt"))
	assert.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC .+ ago$`, text(t, ctx, "#died-at"))
	payload := text(t, ctx, "#payload")
	assert.Contains(t, payload, `"bounced mail": "550 5.1.1 mailbox unavailable"`, "the whole payload, pretty-printed")
	assert.Greater(t, len(payload), redisdelay.PreviewLength)
	assert.Contains(t, text(t, ctx, "#metadata"), redisdelay.DeadLetterAttemptsMetadataKey)
	screenshot(t, ctx, "dead-letter-detail")
	noViolations(t, ctx, c)
}

func TestOperatorSeesWhatComesDueInTheForecast(t *testing.T) {
	q := seed(t)
	// A herd: 40 messages due in 20 to 25 minutes, on top of the seed's 5 in an hour and 3 in
	// two hours.
	var herd []*message.Message
	for i := range 40 {
		msg := message.NewMessage("herd-"+strconv.Itoa(i), []byte(`{"reminder":"herd"}`))
		delay.Message(msg, delay.For(21*time.Minute+time.Duration(i)*time.Second))
		herd = append(herd, msg)
	}
	require.NoError(t, q.pub.Publish("orders", herd...))
	srv := serve(t, q.in, dashboard.Options{})
	ctx, c := browser(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/topic/orders/group/billing")))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#forecast-chart"))))
	counts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#forecast-chart rect")].map(r => r.dataset.count)`))
	require.NoError(t, err)
	require.Len(t, counts, 24)
	assert.Equal(t, "40", counts[4], "the herd, 20 to 25 minutes out")
	assert.Equal(t, "5", counts[11], "the seed's reminders, an hour out")
	assert.Equal(t, "3", counts[23], "the seed's orders, two hours out")
	// The tallest bar is drawn full height, in the accent colour from the style sheet.
	box, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
		const peak = document.querySelector("#forecast-chart rect.peak").getBoundingClientRect();
		const small = document.querySelectorAll("#forecast-chart rect")[23].getBoundingClientRect();
		return {peak: peak.height, small: small.height};
	})()`))
	require.NoError(t, err)
	assert.InDelta(t, box["peak"]*3/40, box["small"], 1.5, "bars are in proportion")
	assert.Equal(t, "rgb(36, 86, 199)", style(t, ctx, "#forecast-chart rect.peak", "fill"))
	assert.Contains(t, text(t, ctx, "#forecast-note"), "2 due already")
	screenshot(t, ctx, "forecast")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#forecast .spans a[href*="forecast=day"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#forecast .spans a.active[href*="forecast=day"]`))))
	first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#forecast-chart rect").dataset.count`))
	require.NoError(t, err)
	assert.Equal(t, "45", first, "a day of hour bars: the herd and the reminders are in the first")
	noViolations(t, ctx, c)
}

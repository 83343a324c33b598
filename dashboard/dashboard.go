// Package dashboard serves a web dashboard of redisdelay queues, built on a
// redisdelay.Inspector: an overview of the topics and their consumer groups, 50 topics per
// page, a page per group that lists its messages by state, a page per message with its payload
// and metadata, the periodic schedules (one page of them, and a page per schedule with its next
// ticks, an overdue one marked), and the running Subscribers and Schedulers (one page of their
// worker records). With
// Options.AllowActions it also pauses and resumes groups and cancels, reschedules, runs now and
// requeues messages; given Options.Scheduler too, it pauses, resumes, triggers and deletes
// schedules.
//
// The pages are server-rendered with html/template and work without JavaScript; htmx, served
// from the handler itself like the style sheet, only turns links and forms into in-page
// requests. Nothing is loaded from elsewhere, and every response carries
// ContentSecurityPolicy, which allows no inline script or style.
//
// Mount the handler at its prefix without stripping it:
//
//	h, err := dashboard.New(in, dashboard.Options{Prefix: "/queues"})
//	mux.Handle("/queues/", h)
//
// Every request passes three checks before the dashboard reads anything: its Host must be a
// loopback name or address or one of Options.AllowedHosts (so that a page on another site
// cannot reach the dashboard through DNS rebinding), Options.Authenticate must let it in, and a
// POST must come from the dashboard's own origin.
package dashboard

// This file owns the dashboard's configuration (Options) and its construction: New checks the
// Options, parses the templates and mounts every route. The checks every request passes are in
// security.go; the pages are in overview.go (its paging in overview_page.go, the tick topic's
// row in overview_ticks.go), group.go, message.go, schedule.go and workers.go, the actions
// in actions.go and schedule.go.

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// DefaultRefreshInterval is Options.RefreshInterval when it is zero.
const DefaultRefreshInterval = 10 * time.Second

// LatenessSource gives the delivery lateness of a consumer group on a topic (how long after
// their due time its messages were claimed): the median and the 99th percentile, ok false when
// it has none (the overview shows "–"). It is called once per group for each overview page
// load, and must be safe for concurrent use. The *Metrics of the metrics package
// (github.com/watermill-redisdelay/redisdelay/metrics) implements it.
type LatenessSource interface {
	Lateness(topic, group string) (p50, p99 time.Duration, ok bool)
}

// Options configure the dashboard. The zero value serves a read-only dashboard of every topic
// at the root path.
type Options struct {
	// Prefix is the path the handler is mounted under, such as "/queues"; every route, link and
	// form starts with it, so the handler must see the full path (do not wrap it in
	// http.StripPrefix). It must start with '/', be a clean path without a trailing slash, and
	// hold only characters that need no escaping in a URL path. Empty means the root.
	Prefix string
	// AllowActions shows the forms that change a queue (pause, resume, cancel, reschedule, run
	// now, requeue; with Scheduler, those of the schedules) and accepts their POSTs. When false, the dashboard is read-only and refuses
	// every POST with 403 Forbidden.
	AllowActions bool
	// Authenticate, when not nil, is asked about every request, pages and static files
	// included, before the dashboard reads anything. When it returns false it has answered the
	// request itself: with 401 Unauthorized and a WWW-Authenticate challenge (see the BasicAuth
	// example), or a redirect to a login page; if it wrote nothing, the answer is 403
	// Forbidden. Nil lets every request in: then anyone who reaches the handler reads every
	// payload.
	Authenticate func(w http.ResponseWriter, r *http.Request) bool
	// Authorize, when not nil, is asked about every action POST, and about every page to decide
	// whether it shows the action forms; a POST it refuses gets 403 Forbidden. It runs after
	// Authenticate. With AllowActions set and both nil, every request may act: protect the
	// handler some other way. POSTs that a browser sends from another origin are refused in
	// any case.
	Authorize func(r *http.Request) bool
	// AllowedHosts are the host names and IP addresses, besides the loopback ones (localhost,
	// 127.0.0.0/8, ::1), that a request's Host may name, with any port; matched without regard
	// to case. A request for any other host gets 421 Misdirected Request, so that a page whose
	// name was rebound to this server's address (DNS rebinding) can neither read nor act. List
	// the names operators use to reach the dashboard, such as "queues.internal" or
	// "10.0.0.5". "*" allows every host: only for a handler behind a proxy that checks the
	// host itself.
	AllowedHosts []string
	// ErrorLog receives the full error of a request that failed in Redis or timed out, whose
	// page shows only what failed; nil means the log package's standard logger.
	ErrorLog *log.Logger
	// Lateness, when not nil, gives the overview each group's delivery lateness (see
	// LatenessSource). The *Metrics of metrics.New is one: serve the dashboard from the process
	// whose subscribers record those metrics. When nil, the overview has no lateness columns,
	// and says how to add them.
	Lateness LatenessSource
	// Thresholds set when a figure shows as a warning or an alarm; the zero value means the
	// defaults (see Thresholds).
	Thresholds Thresholds
	// RefreshInterval is how often the overview and the group pages reload their figures in
	// place (htmx polling; each page has a link that pauses it). DefaultRefreshInterval when
	// zero; a negative value turns auto-refresh off. A refresh costs what loading the page
	// costs.
	RefreshInterval time.Duration
	// Scheduler, when not nil, makes the schedules' pause, resume, trigger and delete (with
	// AllowActions, and Authorize when set); it need not run (see schedule.Scheduler). Its
	// Publisher must have the Inspector's Redis client and key prefix, so that it acts on the
	// schedules the pages show: New refuses one that has not. When nil, the schedule pages are
	// read-only and say so.
	Scheduler *schedule.Scheduler
	// Topics limits the dashboard to these topics: the overview shows only those that exist,
	// and the pages of any other topic answer 404 Not Found; so do the pages of the schedules
	// that publish to another topic, which the schedules page leaves out. Empty means every
	// topic of the Inspector's registry.
	Topics []string
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// server is the dashboard's handler state; it holds no per-request state.
type server struct {
	in     *redisdelay.Inspector
	opts   Options
	topics map[string]bool // nil: every topic
	hosts  map[string]bool // Options.AllowedHosts, lower case; nil when "*" allows every host
	pages  map[string]*template.Template
}

// New returns the dashboard's handler for the queues in reaches. It makes no Redis call; each
// page makes its own, bounded by the Inspector's OperationTimeout. Errors: a nil Inspector, a
// Prefix that is not a clean path of plain characters (see Options.Prefix), or a Scheduler on
// another Redis client or key prefix than the Inspector's.
func New(in *redisdelay.Inspector, opts Options) (http.Handler, error) {
	if in == nil {
		return nil, errors.New("dashboard: the Inspector is nil")
	}
	if err := checkPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if err := checkScheduler(in, opts.Scheduler); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	opts.Thresholds = opts.Thresholds.withDefaults()
	s := &server{in: in, opts: opts, pages: pages, hosts: allowedHosts(opts.AllowedHosts)}
	if len(opts.Topics) > 0 {
		s.topics = map[string]bool{}
		for _, t := range opts.Topics {
			s.topics[t] = true
		}
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	return s.secured(s.routes(static)), nil
}

// routes returns the mux of every page, action and static file, each under Options.Prefix;
// any other path gets the 404 page.
func (s *server) routes(static fs.FS) http.Handler {
	p := s.opts.Prefix
	mux := http.NewServeMux()
	group := p + "/topic/{topic}/group/{group}"
	mux.HandleFunc("GET "+p+"/{$}", s.overview)
	mux.Handle("GET "+p+"/static/", http.StripPrefix(p+"/static/", filesOnly(static)))
	mux.HandleFunc("GET "+group, s.group)
	mux.HandleFunc("GET "+group+"/message", s.message)
	parked := p + "/topic/{topic}/parked" // the messages of a topic with no group
	mux.HandleFunc("GET "+parked, s.group)
	mux.HandleFunc("GET "+parked+"/message", s.message)
	mux.HandleFunc("POST "+group+"/pause", s.act(s.pause))
	mux.HandleFunc("POST "+group+"/resume", s.act(s.resume))
	mux.HandleFunc("POST "+group+"/message/cancel", s.act(s.cancel))
	mux.HandleFunc("POST "+group+"/message/reschedule", s.act(s.reschedule))
	mux.HandleFunc("POST "+group+"/message/run-now", s.act(s.runNow))
	mux.HandleFunc("POST "+group+"/message/requeue", s.act(s.requeue))
	schedule := p + "/schedules/{schedule}"
	mux.HandleFunc("GET "+p+"/schedules", s.schedules)
	mux.HandleFunc("GET "+p+"/workers", s.workers)
	mux.HandleFunc("GET "+schedule, s.schedule)
	mux.HandleFunc("POST "+schedule+"/pause", s.actSchedule(s.pauseSchedule))
	mux.HandleFunc("POST "+schedule+"/resume", s.actSchedule(s.resumeSchedule))
	mux.HandleFunc("POST "+schedule+"/trigger", s.actSchedule(s.triggerSchedule))
	mux.HandleFunc("POST "+schedule+"/delete", s.actSchedule(s.deleteSchedule))
	mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, http.StatusNotFound, fmt.Sprintf("page %s: %v", r.URL.Path, redisdelay.ErrNotFound))
	})
	return mux
}

// filesOnly serves the files of fsys, and 404 Not Found for a directory, which
// http.FileServerFS would list.
func filesOnly(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimSuffix(r.URL.Path, "/")
		if name == "" {
			name = "."
		}
		if st, err := fs.Stat(fsys, name); err != nil || st.IsDir() {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// parsePages parses each page's template together with the layout.
func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "group", "message", "schedules", "schedule", "workers", "problem"} {
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// checkPrefix reports whether prefix can start every route (see Options.Prefix).
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	bad := !strings.HasPrefix(prefix, "/") || prefix == "/" || path.Clean(prefix) != prefix ||
		strings.ContainsAny(prefix, "{}")
	for _, seg := range strings.Split(prefix[1:], "/") {
		bad = bad || url.PathEscape(seg) != seg
	}
	if bad {
		return fmt.Errorf("dashboard: Options.Prefix %q is not a clean path such as \"/queues\" of characters that need no escaping", prefix)
	}
	return nil
}

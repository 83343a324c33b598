// Package dashboard serves a web dashboard of redisdelay queues, built on a
// redisdelay.Inspector: an overview of every topic and consumer group, a page per group that
// lists its messages by state, and a page per message with its payload and metadata. With
// Options.AllowActions it also pauses and resumes groups and cancels, reschedules, runs now and
// requeues messages.
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

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// ContentSecurityPolicy is the Content-Security-Policy header of every response: scripts,
// styles and images come from the dashboard itself only (images also as data: URLs), and no
// page may be framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

// DefaultRefreshInterval is Options.RefreshInterval when it is zero.
const DefaultRefreshInterval = 10 * time.Second

// Options configure the dashboard. The zero value serves a read-only dashboard of every topic
// at the root path.
type Options struct {
	// Prefix is the path the handler is mounted under, such as "/queues"; every route, link and
	// form starts with it, so the handler must see the full path (do not wrap it in
	// http.StripPrefix). It must start with '/', be a clean path without a trailing slash, and
	// hold only characters that need no escaping in a URL path. Empty means the root.
	Prefix string
	// AllowActions shows the forms that change a queue (pause, resume, cancel, reschedule, run
	// now, requeue) and accepts their POSTs. When false, the dashboard is read-only and refuses
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
	// Lateness, when not nil, gives the overview each group's delivery lateness (how long after
	// their due time messages were claimed), median and 99th percentile; ok false shows "–".
	// Metrics.Lateness fits it: serve the dashboard from the process whose subscribers record
	// those Metrics. When nil, the overview has no lateness columns, and says how to add them.
	Lateness func(topic, group string) (p50, p99 time.Duration, ok bool)
	// Thresholds set when a figure shows as a warning or an alarm; the zero value means the
	// defaults (see Thresholds).
	Thresholds Thresholds
	// RefreshInterval is how often the overview and the group pages reload their figures in
	// place (htmx polling; each page has a link that pauses it). DefaultRefreshInterval when
	// zero; a negative value turns auto-refresh off. A refresh costs what loading the page
	// costs.
	RefreshInterval time.Duration
	// Topics limits the dashboard to these topics: the overview shows only those that exist,
	// and the pages of any other topic answer 404 Not Found. Empty means every topic of the
	// Inspector's registry.
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
// page makes its own, bounded by the Inspector's OperationTimeout. Errors: a nil Inspector, or
// a Prefix that is not a clean path of plain characters (see Options.Prefix).
func New(in *redisdelay.Inspector, opts Options) (http.Handler, error) {
	if in == nil {
		return nil, errors.New("dashboard: the Inspector is nil")
	}
	if err := checkPrefix(opts.Prefix); err != nil {
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
	s := &server{in: in, opts: opts, pages: pages, hosts: map[string]bool{}}
	for _, h := range opts.AllowedHosts {
		if h == "*" {
			s.hosts = nil
			break
		}
		s.hosts[normalHost(h)] = true
	}
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

	p := opts.Prefix
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
	mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, http.StatusNotFound, fmt.Sprintf("page %s: %v", r.URL.Path, redisdelay.ErrNotFound))
	})
	return s.secured(mux), nil
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
	for _, name := range []string{"overview", "group", "message", "problem"} {
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

// secured sets the security headers of every response, and refuses requests for another host
// (421), those Authenticate turns away, and cross-origin POSTs (403), before h reads anything.
func (s *server) secured(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		if !s.hostAllowed(r.Host) {
			http.Error(w, "dashboard: this server does not serve host "+fmt.Sprintf("%q", r.Host)+"; see dashboard.Options.AllowedHosts", http.StatusMisdirectedRequest)
			return
		}
		if s.opts.Authenticate != nil {
			tw := &trackingWriter{ResponseWriter: w}
			if !s.opts.Authenticate(tw, r) {
				if !tw.wrote {
					http.Error(w, "dashboard: not authenticated", http.StatusForbidden)
				}
				return
			}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && crossOrigin(r) {
			http.Error(w, "dashboard: cross-origin request refused", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// trackingWriter records whether a response was started.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *trackingWriter) WriteHeader(status int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *trackingWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// hostAllowed reports whether host, a request's Host with or without a port, is a loopback
// name or address or one of Options.AllowedHosts.
func (s *server) hostAllowed(host string) bool {
	if s.hosts == nil {
		return true
	}
	h := normalHost(host)
	if h == "localhost" || strings.HasSuffix(h, ".localhost") || s.hosts[h] {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// normalHost returns host without its port, IPv6 brackets and trailing dot, in lower case.
func normalHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// crossOrigin reports whether a browser sent r from another origin, so that another site
// cannot make an operator's browser submit an action (CSRF): by Sec-Fetch-Site, which every
// current browser sends, or else by Origin. A request with neither header is not from a
// browser and is left to Authorize. (Go 1.25's http.CrossOriginProtection does the same.)
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default:
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host != r.Host
}

// page is what the layout template renders around a page's own content.
type page struct {
	Title     string
	Static    string // URL of the static files
	Home      string // URL of the overview
	Redis     string // the Redis address, "" when unknown
	KeyPrefix string
	Crumbs    []crumb
	Notice    string
	Body      any
}

// crumb is one link of the navigation trail.
type crumb struct{ Label, URL string }

// buffers hold rendered pages; reusing them spares the overview of many topics from growing a
// buffer of a megabyte or more on every request.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// render executes a page template into a buffer first, so that a template error becomes a
// clean 500 rather than half a page.
func (s *server) render(w http.ResponseWriter, status int, name string, p page) {
	p.Static = s.opts.Prefix + "/static"
	p.Home = s.opts.Prefix + "/"
	p.Redis, p.KeyPrefix = s.in.Addr(), s.in.KeyPrefix()
	buf := buffers.Get().(*bytes.Buffer)
	defer buffers.Put(buf)
	buf.Reset()
	if err := s.pages[name].ExecuteTemplate(buf, "layout", p); err != nil {
		http.Error(w, "dashboard: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problem renders the error page with status and a message that says what went wrong.
func (s *server) problem(w http.ResponseWriter, status int, msg string) {
	s.render(w, status, "problem", page{Title: http.StatusText(status), Body: struct {
		Status int
		Text   string
		Msg    string
	}{status, http.StatusText(status), msg}})
}

// fail renders err with the status its kind calls for: 404 for ErrNotFound, 400 for a name or
// key that cannot exist, whose text says what is wrong; 500 for the rest (Redis errors,
// timeouts), whose text may hold Redis internals (a script's SHA and line, addresses): the page
// says only what failed, and ErrorLog gets the error under an id that the page shows.
func (s *server) fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, redisdelay.ErrNotFound):
		s.problem(w, http.StatusNotFound, err.Error())
	case errors.Is(err, redisdelay.ErrInvalidName), errors.Is(err, redisdelay.ErrInvalidKey):
		s.problem(w, http.StatusBadRequest, err.Error())
	default:
		var b [5]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		logger := s.opts.ErrorLog
		if logger == nil {
			logger = log.Default()
		}
		logger.Printf("dashboard: error %s: %v", id, err)
		what := "Redis failed or did not answer in time"
		if errors.Is(err, context.DeadlineExceeded) {
			what = "Redis did not answer in time"
		}
		s.problem(w, http.StatusInternalServerError, fmt.Sprintf("Reading or changing the queue failed: %s. The server's log has the error under id %s.", what, id))
	}
}

// target returns the topic and group a request names (ParkedGroup on the pages of a topic's
// parked messages), or reports the error and false: 400 for a name that cannot exist, 404 for
// a topic outside Options.Topics.
func (s *server) target(w http.ResponseWriter, r *http.Request) (topic, group string, ok bool) {
	topic, group = r.PathValue("topic"), r.PathValue("group")
	err := redisdelay.ValidateName("topic", topic)
	if strings.Contains(r.Pattern, "{group}") {
		err = errors.Join(err, redisdelay.ValidateName("consumer group", group))
	} else {
		group = redisdelay.ParkedGroup
	}
	if err != nil {
		s.fail(w, err)
		return "", "", false
	}
	if s.topics != nil && !s.topics[topic] {
		s.fail(w, fmt.Errorf("topic %q is not on this dashboard: %w", topic, redisdelay.ErrNotFound))
		return "", "", false
	}
	return topic, group, true
}

// groupPath is the path of a group's page; for ParkedGroup, of the page of the topic's parked
// messages.
func (s *server) groupPath(topic, group string) string {
	if group == redisdelay.ParkedGroup {
		return s.opts.Prefix + "/topic/" + url.PathEscape(topic) + "/parked"
	}
	return s.opts.Prefix + "/topic/" + url.PathEscape(topic) + "/group/" + url.PathEscape(group)
}

// groupURL is the URL of a group's page with query q (nil for none). Names are path-escaped,
// so any name, '/' included, is one path segment; "." and ".." are the exception, since
// browsers resolve them (escaped too) before they send the request.
func (s *server) groupURL(topic, group string, q url.Values) string {
	u := s.groupPath(topic, group)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// messageURL is the URL of a message's page, or of one of its actions, with query q.
func (s *server) messageURL(topic, group, action string, q url.Values) string {
	u := s.groupPath(topic, group) + "/message" + action
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// mayAct reports whether r may see and use the action forms.
func (s *server) mayAct(r *http.Request) bool {
	return s.opts.AllowActions && (s.opts.Authorize == nil || s.opts.Authorize(r))
}

package dashboard

// This file owns what every page shares: the layout around a page's own content, rendering a
// page into a response, the error page with the status each kind of error calls for, and the
// auto-refresh of the pages that reload their figures in place.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// page is what the layout template renders around a page's own content.
type page struct {
	Title     string
	Static    string // URL of the static files
	Home      string // URL of the overview
	Schedules string // URL of the schedules page
	Workers   string // URL of the workers page
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
	p.Schedules = s.opts.Prefix + "/schedules"
	p.Workers = s.opts.Prefix + "/workers"
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

// live is the auto-refresh of a page (Options.RefreshInterval): while Polling, htmx fetches URL
// every Every and swaps the page's #live region for the new one; PauseURL is the same page
// without polling (?refresh=off), ResumeURL the page with it again ("" when auto-refresh is
// off altogether).
type live struct {
	Updated                  time.Time
	Polling                  bool
	Every                    time.Duration
	URL, PauseURL, ResumeURL string
}

// Trigger is the hx-trigger value of the polling: htmx reads an interval in ms or s only.
func (l live) Trigger() string {
	return "every " + strconv.FormatInt(l.Every.Milliseconds(), 10) + "ms"
}

// live returns the auto-refresh of the page r asked for.
func (s *server) live(r *http.Request) live {
	l := live{Updated: time.Now(), Every: s.opts.RefreshInterval}
	if l.Every < 0 {
		return l
	}
	q := r.URL.Query()
	paused := q.Get("refresh") == "off"
	q.Del("done") // a poll or a resumed page does not repeat an action's notice
	q.Del("refresh")
	pageURL := func(q url.Values) string {
		if len(q) == 0 {
			return r.URL.EscapedPath()
		}
		return r.URL.EscapedPath() + "?" + q.Encode()
	}
	l.URL, l.ResumeURL = pageURL(q), pageURL(q)
	q.Set("refresh", "off")
	l.PauseURL = pageURL(q)
	l.Polling = !paused
	return l
}

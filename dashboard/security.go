package dashboard

// This file owns the checks every request passes before the dashboard reads anything: the
// security headers (ContentSecurityPolicy), the Host check against DNS rebinding
// (Options.AllowedHosts), Options.Authenticate, the refusal of cross-origin POSTs, and
// Options.Authorize's say over the action forms.

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ContentSecurityPolicy is the Content-Security-Policy header of every response: scripts,
// styles and images come from the dashboard itself only (images also as data: URLs), and no
// page may be framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

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

// allowedHosts returns the set of Options.AllowedHosts, normalized by normalHost; nil when "*"
// allows every host.
func allowedHosts(list []string) map[string]bool {
	hosts := map[string]bool{}
	for _, h := range list {
		if h == "*" {
			return nil
		}
		hosts[normalHost(h)] = true
	}
	return hosts
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

// mayAct reports whether r may see and use the action forms.
func (s *server) mayAct(r *http.Request) bool {
	return s.opts.AllowActions && (s.opts.Authorize == nil || s.opts.Authorize(r))
}

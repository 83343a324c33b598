package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

// The dashboard server's timeouts: for reading a request, for writing a response (a page makes
// a few Inspector calls, each bounded by --timeout), and for an idle keep-alive connection.
const (
	serverReadTimeout  = 30 * time.Second
	serverWriteTimeout = 2 * time.Minute
	serverIdleTimeout  = 2 * time.Minute
)

// dashboardFlags are the flags of the dashboard command.
type dashboardFlags struct {
	listen, path string
	allowActions bool
	hosts        []string // --allow-host
}

// dashboardCommand serves the web dashboard (package dashboard) until interrupted.
func (a *app) dashboardCommand() *cobra.Command {
	var f dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard until interrupted (read-only unless --allow-actions)",
		Long: "Serve the web dashboard on --listen until SIGINT or SIGTERM. It is read-only unless " +
			"--allow-actions is given; with it, anyone who reaches the address may act, so keep it " +
			"on a loopback or otherwise protected address. It has no authentication: anyone who " +
			"reaches it reads every payload. It answers only requests for a loopback host " +
			"(localhost, 127.0.0.1, [::1]), the host of --listen, and those of --allow-host, so " +
			"that no other site's page can reach it by DNS rebinding.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.serveDashboard(cmd.Context(), f)
		},
	}
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on")
	cmd.Flags().StringVar(&f.path, "path", "/", "URL path prefix to mount the dashboard under")
	cmd.Flags().BoolVar(&f.allowActions, "allow-actions", false, "let the dashboard pause, resume, cancel, reschedule, run and requeue, and pause, resume, trigger and delete schedules")
	cmd.Flags().StringSliceVar(&f.hosts, "allow-host", nil, "host name or IP address (comma-separated, repeatable) that browsers use to reach the dashboard, besides loopback and the --listen host; \"*\" allows any")
	return cmd
}

// serveDashboard serves the dashboard that f describes until ctx is done (see serveUntil),
// after warning on stderr when it is reachable from other machines or may act.
func (a *app) serveDashboard(ctx context.Context, f dashboardFlags) error {
	mount := strings.TrimSuffix("/"+strings.Trim(f.path, "/"), "/") // "" for the root
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	h, err := a.dashboardHandler(f, mount, host)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(mount+"/", h)
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	if !isLoopback(host) {
		fmt.Fprintf(a.stderr, "warning: the dashboard listens on %s, which other machines can reach; it has no authentication, so whoever reaches it reads every payload\n", ln.Addr())
	}
	if f.allowActions {
		fmt.Fprintln(a.stderr, "warning: --allow-actions: whoever reaches the dashboard can pause and resume groups, cancel, reschedule, run and requeue messages, and pause, resume, trigger and delete schedules")
	}
	srv := newServer(mux)
	fmt.Fprintf(a.stdout, "dashboard on http://%s%s\n", ln.Addr(), mount+"/")
	return serveUntil(ctx, srv, ln)
}

// dashboardHandler returns the dashboard that f describes, mounted under mount, which answers
// requests for the hosts of --allow-host and for host, the --listen host (unless it is empty
// or unspecified, 0.0.0.0 or ::); with --allow-actions it acts on schedules through the
// Scheduler of the schedules commands.
func (a *app) dashboardHandler(f dashboardFlags, mount, host string) (http.Handler, error) {
	hosts := f.hosts
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		hosts = append(hosts, host) // the address operators will browse to
	}
	opts := dashboard.Options{Prefix: mount, AllowActions: f.allowActions, AllowedHosts: hosts}
	if f.allowActions {
		var err error
		if opts.Scheduler, err = a.scheduler(); err != nil {
			return nil, err
		}
	}
	return dashboard.New(a.in, opts)
}

// serveUntil serves srv on ln until serving fails, which is the error, or ctx is done; then it
// shuts srv down, waiting up to 5 s for the requests in progress.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newServer returns the dashboard's server of h, with every timeout set, so that no client
// can hold a connection open forever.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       serverReadTimeout,
		WriteTimeout:      serverWriteTimeout,
		IdleTimeout:       serverIdleTimeout,
	}
}

// isLoopback reports whether a listen host is reachable from this machine only: localhost or a
// loopback address. An empty host listens on every interface.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

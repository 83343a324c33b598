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

// dashboardCommand serves the web dashboard (package dashboard) until interrupted.
func (a *app) dashboardCommand() *cobra.Command {
	var listen, path string
	var allowActions bool
	var hosts []string
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
			prefix := "/" + strings.Trim(path, "/")
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return fmt.Errorf("--listen %q: %w", listen, err)
			}
			if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
				hosts = append(hosts, host) // the address operators will browse to
			}
			opts := dashboard.Options{Prefix: strings.TrimSuffix(prefix, "/"), AllowActions: allowActions, AllowedHosts: hosts}
			if allowActions {
				if opts.Scheduler, err = a.scheduler(); err != nil {
					return err
				}
			}
			h, err := dashboard.New(a.in, opts)
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.Handle(strings.TrimSuffix(prefix, "/")+"/", h)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			if !isLoopback(host) {
				fmt.Fprintf(a.stderr, "warning: the dashboard listens on %s, which other machines can reach; it has no authentication, so whoever reaches it reads every payload\n", ln.Addr())
			}
			if allowActions {
				fmt.Fprintln(a.stderr, "warning: --allow-actions: whoever reaches the dashboard can pause and resume groups, cancel, reschedule, run and requeue messages, and pause, resume, trigger and delete schedules")
			}
			srv := newServer(mux)
			fmt.Fprintf(a.stdout, "dashboard on http://%s%s\n", ln.Addr(), strings.TrimSuffix(prefix, "/")+"/")
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve on")
	cmd.Flags().StringVar(&path, "path", "/", "URL path prefix to mount the dashboard under")
	cmd.Flags().BoolVar(&allowActions, "allow-actions", false, "let the dashboard pause, resume, cancel, reschedule, run and requeue, and pause, resume, trigger and delete schedules")
	cmd.Flags().StringSliceVar(&hosts, "allow-host", nil, "host name or IP address (comma-separated, repeatable) that browsers use to reach the dashboard, besides loopback and the --listen host; \"*\" allows any")
	return cmd
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

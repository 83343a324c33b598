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

// dashboardCommand serves the web dashboard (package dashboard) until interrupted.
func (a *app) dashboardCommand() *cobra.Command {
	var listen, path string
	var allowActions bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard until interrupted (read-only unless --allow-actions)",
		Long: "Serve the web dashboard on --listen until SIGINT or SIGTERM. It is read-only unless " +
			"--allow-actions is given; with it, anyone who reaches the address may act, so keep it " +
			"on a loopback or otherwise protected address.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			prefix := "/" + strings.Trim(path, "/")
			h, err := dashboard.New(a.in, dashboard.Options{Prefix: strings.TrimSuffix(prefix, "/"), AllowActions: allowActions})
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.Handle(strings.TrimSuffix(prefix, "/")+"/", h)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
	cmd.Flags().BoolVar(&allowActions, "allow-actions", false, "let the dashboard pause, resume, cancel, reschedule, run and requeue")
	return cmd
}

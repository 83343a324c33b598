// Package browsertest drives the dashboard (package dashboard) in a headless Chromium through
// chromedp, against a throw-away redis-server: what a person sees and clicks, the strict
// Content-Security-Policy included. It is a module of its own so that chromedp stays out of
// the library's go.mod.
//
// Run it with
//
//	cd internal/browsertest && go test ./...
//
// It needs Chromium at /usr/bin/chromium (apt-get install chromium) and redis-server on the
// PATH. Without Chromium the tests skip, unless REDISDELAY_REQUIRE_BROWSER is set, which makes
// that a failure (as REDISDELAY_REQUIRE_REDIS does for redis-server). Screenshots of each page
// go to $REDISDELAY_ARTIFACTS, or testdata/artifacts in this directory (git-ignored).
package browsertest

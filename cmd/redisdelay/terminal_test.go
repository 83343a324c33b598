package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// Bytes a terminal takes for commands: set the clipboard (OSC 52), clear the screen, colour.
const (
	clipboard   = "\x1b]52;c;aGVsbG8=\x07"
	clearScreen = "\x1b[2J"
	red         = "\x1b[31m"
)

func TestTablesEscapeControlCharactersAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	ctx := context.Background()
	q.register(topic, group)
	payload := "pay " + clipboard + " load " + clearScreen
	msg := newMessage("order-1", payload)
	msg.Metadata.Set("note", red+"red")
	msg.Metadata.Set("raw\xff", "plain")
	q.schedule(topic, msg)
	// A topic and group stored before the library refused such names.
	evilTopic, evilGroup := "evil"+clearScreen+"\xfe", "group"+clipboard
	require.NoError(t, q.client.HSet(ctx, redisdelay.DefaultKeyPrefix+"topics", evilTopic, 1).Err())
	require.NoError(t, q.client.SAdd(ctx, redisdelay.DefaultKeyPrefix+"{"+evilTopic+"}:groups", evilGroup, "fine").Err())

	noEscapes := func(out string) {
		t.Helper()
		assert.NotContains(t, out, "\x1b")
		assert.NotContains(t, out, "\x07")
		assert.NotContains(t, out, "\xfe")
		assert.NotContains(t, out, "\xff")
	}
	out := q.ok("topics")
	noEscapes(out)
	assert.Regexp(t, `(?m)^orders\s+1\s+default$`, out, "plain values stay plain")
	assert.Contains(t, out, strconv.Quote(evilTopic))
	assert.Contains(t, out, strconv.Quote("fine,"+evilGroup))

	out = q.ok("stats")
	noEscapes(out)
	assert.Contains(t, out, strconv.Quote(evilTopic))
	assert.Contains(t, out, strconv.Quote(evilGroup))

	out = q.ok("show", "--topic", topic, "--key", "order-1")
	noEscapes(out)
	assert.Regexp(t, `(?m)^key:\s+order-1$`, out)
	assert.Contains(t, out, `note="\x1b[31mred"`)
	assert.Contains(t, out, `"raw\xff"=plain`)
	assert.True(t, strings.HasSuffix(out, "payload (with control characters, quoted):\n"+strconv.Quote(payload)+"\n"), out)

	out = q.ok("list", "--topic", topic, "--state", "scheduled")
	noEscapes(out)

	// JSON holds every value exactly (as far as JSON can: invalid UTF-8 becomes U+FFFD).
	var shown messageView
	q.json(&shown, "show", "--topic", topic, "--key", "order-1")
	assert.Equal(t, payload, shown.Payload)
	assert.Equal(t, red+"red", shown.Metadata["note"])
	var topics []topicView
	q.json(&topics, "topics")
	assert.Contains(t, topics, topicView{Topic: strings.ToValidUTF8(evilTopic, "\uFFFD"), Partitions: 1, Groups: []string{"fine", evilGroup}})
}

func TestPrintableQuotesOnlyWhatATerminalWouldInterpret(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"orders":          "orders",
		"ünïcødé ✓ 注文":    "ünïcødé ✓ 注文",
		"with space":      "with space",
		"":                "",
		"tab\there":       `"tab\there"`,
		"new\nline":       `"new\nline"`,
		clearScreen:       `"\x1b[2J"`,
		"bidi\u202eevil":  `"bidi\u202eevil"`,
		"bad\xff\xfe":     `"bad\xff\xfe"`,
		"nul\x00":         `"nul\x00"`,
		"c1\u009bcontrol": `"c1\u009bcontrol"`,
	} {
		assert.Equal(t, want, printable(in), "%q", in)
	}
}

func TestDashboardServerSetsEveryTimeout(t *testing.T) {
	t.Parallel()
	srv := newServer(http.NotFoundHandler())
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.Positive(t, srv.ReadTimeout)
	assert.Positive(t, srv.WriteTimeout)
	assert.Positive(t, srv.IdleTimeout)
}

func TestDashboardWarnsAndServesOnlyItsHosts(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)

	start := func(args ...string) (base string, stderr *bufio.Reader, stop func()) {
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		cmd := exec.CommandContext(ctx, binary, append([]string{"--addr", q.addr, "dashboard"}, args...)...)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		errPipe, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		u := strings.TrimSpace(strings.TrimPrefix(line, "dashboard on http://"))
		addr := strings.TrimSuffix(u, "/")
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		return "http://127.0.0.1:" + port, bufio.NewReader(errPipe), func() {
			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			_, _ = io.Copy(io.Discard, errPipe)
			require.NoError(t, cmd.Wait(), "the dashboard must end cleanly on SIGINT")
			cancel()
		}
	}
	statusFor := func(base, host string) int {
		req, err := http.NewRequest(http.MethodGet, base+"/", nil)
		require.NoError(t, err)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}

	base, stderr, stop := start("--listen", "0.0.0.0:0", "--allow-actions", "--allow-host", "queues.test,10.1.2.3")
	warnings := []string{}
	for range 2 {
		line, err := stderr.ReadString('\n')
		require.NoError(t, err)
		warnings = append(warnings, line)
	}
	assert.Contains(t, warnings[0], "warning: the dashboard listens on")
	assert.Contains(t, warnings[0], "other machines can reach")
	assert.Contains(t, warnings[1], "warning: --allow-actions")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	assert.Equal(t, http.StatusMisdirectedRequest, statusFor(base, "evil.example:"+port))
	assert.Equal(t, http.StatusOK, statusFor(base, "queues.test:"+port))
	assert.Equal(t, http.StatusOK, statusFor(base, "10.1.2.3:"+port))
	assert.Equal(t, http.StatusOK, statusFor(base, "localhost:"+port))
	stop()

	// On loopback and read-only: no warning.
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--addr", q.addr, "dashboard", "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	u := strings.TrimSpace(strings.TrimPrefix(line, "dashboard on "))
	assert.Equal(t, http.StatusOK, statusFor(strings.TrimSuffix(u, "/"), strings.TrimPrefix(strings.TrimSuffix(u, "/"), "http://")))
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	assert.Empty(t, errOut.String())
}

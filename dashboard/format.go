package dashboard

// This file owns how the pages show values: the functions the templates call to format
// durations, times and sizes, and the form of a message's payload on its page.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"strconv"
	"time"
	"unicode/utf8"
)

// formatPayload returns the payload as the message page shows it: indented when it is JSON,
// as it is when it is text, as a hex dump otherwise; and which of these it is.
func formatPayload(p []byte) (string, string) {
	if json.Valid(p) {
		var buf bytes.Buffer
		if json.Indent(&buf, p, "", "  ") == nil {
			return buf.String(), "JSON"
		}
	}
	if utf8.Valid(p) {
		return string(p), "text"
	}
	return hex.Dump(p), "binary (hex dump)"
}

// templateFuncs format values for the templates.
var templateFuncs = map[string]any{
	"duration": shortDuration,
	"when":     when,
	"clock":    clock,
	"bytes": func(n int) string {
		if n < 1024 {
			return strconv.Itoa(n) + " B"
		}
		return strconv.FormatFloat(float64(n)/1024, 'f', 1, 64) + " KiB"
	},
}

// when shows a time on the Redis clock: UTC to the millisecond in a <time> element, and how
// far it is from now on this machine's clock; "–" for the zero time.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "–"
	}
	rel := "in " + shortDuration(time.Until(t))
	if d := time.Since(t); d > 0 {
		rel = shortDuration(d) + " ago"
	}
	u := t.UTC()
	return template.HTML(`<time datetime="` + u.Format(time.RFC3339Nano) + `">` + u.Format("2006-01-02 15:04:05.000 UTC") +
		`</time> <span class="muted">` + rel + "</span>")
}

// clock shows the time of day of t in UTC, to the second, in a <time> element.
func clock(t time.Time) template.HTML {
	u := t.UTC()
	return template.HTML(`<time datetime="` + u.Format(time.RFC3339) + `">` + u.Format("15:04:05") + ` UTC</time>`)
}

// shortDuration rounds d to about three significant figures: 1.23s, 4m5s, 820µs.
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	}
	return d.String()
}

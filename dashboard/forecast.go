package dashboard

// This file owns the due-time forecast chart of a group page: the spans it offers and the
// inline SVG bar chart with its summary.

import (
	"html"
	"html/template"
	"strconv"
	"strings"
	"time"
)

// forecastSpan is one choice of the group page's due-time forecast: Buckets bars of Bucket
// each, selected by ?forecast=Name.
type forecastSpan struct {
	Name    string
	Label   string
	Bucket  time.Duration
	Buckets int
}

// forecastSpans are the forecasts a group page offers; the first is the default.
var forecastSpans = []forecastSpan{
	{"hours", "next 2 hours, 5-minute bars", 5 * time.Minute, 24},
	{"day", "next 24 hours, 1-hour bars", time.Hour, 24},
	{"minutes", "next 10 minutes, 30-second bars", 30 * time.Second, 20},
}

// The forecast chart's drawing area, in SVG user units; the SVG scales to the page's width.
const (
	chartWidth  = 720
	chartHeight = 120
	chartTop    = 16 // room for the largest count's label
	chartBottom = 18 // room for the time labels
)

// forecastChart draws counts, messages falling due in consecutive buckets of width bucket from
// start, as an inline SVG bar chart. It uses SVG elements and attributes only (no inline style
// or script), which the dashboard's Content-Security-Policy allows; its colours come from the
// style sheet through classes. Each bar has a <title> that says its count and time range.
func forecastChart(counts []int64, start time.Time, bucket time.Duration) template.HTML {
	var peak int64
	for _, c := range counts {
		peak = max(peak, c)
	}
	var b strings.Builder
	b.Grow(200 * (len(counts) + 4))
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	b.WriteString(`<svg class="forecast" id="forecast-chart" viewBox="0 0 ` + strconv.Itoa(chartWidth) + " " + strconv.Itoa(chartHeight) +
		`" role="img" aria-label="` + html.EscapeString(forecastSummary(counts, bucket)) + `">` + "\n")
	plot := float64(chartHeight - chartTop - chartBottom)
	slot := float64(chartWidth) / float64(max(len(counts), 1))
	gap := min(slot/5, 4)
	b.WriteString(`<line class="axis" x1="0" y1="` + f(chartTop+plot) + `" x2="` + strconv.Itoa(chartWidth) + `" y2="` + f(chartTop+plot) + `"/>` + "\n")
	for k, c := range counts {
		h := 0.0
		if peak > 0 {
			h = plot * float64(c) / float64(peak)
		}
		if c > 0 {
			h = max(h, 1.5) // a bar of one message among thousands stays visible
		}
		from := start.Add(time.Duration(k) * bucket)
		class := "bar"
		if c == peak && peak > 0 {
			class = "bar peak"
		}
		b.WriteString(`<rect class="` + class + `" data-count="` + strconv.FormatInt(c, 10) + `" x="` + f(float64(k)*slot+gap/2) +
			`" y="` + f(chartTop+plot-h) + `" width="` + f(slot-gap) + `" height="` + f(h) + `"><title>`)
		b.WriteString(strconv.FormatInt(c, 10) + " due " + clockText(from) + "–" + clockText(from.Add(bucket)) + " UTC")
		b.WriteString("</title></rect>\n")
	}
	label := func(x float64, anchor, text string) {
		b.WriteString(`<text class="tick" x="` + f(x) + `" y="` + strconv.Itoa(chartHeight-4) + `" text-anchor="` + anchor + `">` + html.EscapeString(text) + "</text>\n")
	}
	label(0, "start", "now")
	if len(counts) > 1 {
		label(float64(chartWidth)/2, "middle", "+"+shortSpan(bucket*time.Duration(len(counts))/2))
	}
	label(chartWidth, "end", "+"+shortSpan(bucket*time.Duration(len(counts))))
	if peak > 0 {
		b.WriteString(`<text class="peak-label" x="0" y="11">peak ` + strconv.FormatInt(peak, 10) + " per " + html.EscapeString(shortSpan(bucket)) + "</text>\n")
	}
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// forecastSummary says in words what the chart shows, for screen readers.
func forecastSummary(counts []int64, bucket time.Duration) string {
	var total, peak int64
	at := 0
	for k, c := range counts {
		total += c
		if c > peak {
			peak, at = c, k
		}
	}
	s := strconv.FormatInt(total, 10) + " messages fall due in the next " + shortSpan(bucket*time.Duration(len(counts)))
	if peak > 0 {
		s += "; the most, " + strconv.FormatInt(peak, 10) + ", in the " + shortSpan(bucket) + " from +" + shortSpan(bucket*time.Duration(at))
	}
	return s
}

// clockText is t's time of day in UTC, to the second.
func clockText(t time.Time) string { return t.UTC().Format("15:04:05") }

// shortSpan writes a whole span without its zero units: 2h, 5m, 30s, 1h30m.
func shortSpan(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

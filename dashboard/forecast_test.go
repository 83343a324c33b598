package dashboard

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestForecastChartDrawsOneBarPerBucketScaledToThePeak(t *testing.T) {
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	svg := string(forecastChart([]int64{0, 5, 10, 1, 0}, start, 5*time.Minute))

	bars := regexp.MustCompile(`<rect class="([^"]+)" data-count="(\d+)" x="[0-9.]+" y="[0-9.]+" width="[0-9.]+" height="([0-9.]+)"><title>([^<]*)</title></rect>`).FindAllStringSubmatch(svg, -1)
	require.Len(t, bars, 5)
	plot := float64(chartHeight - chartTop - chartBottom)
	for k, want := range []struct {
		class, count string
		height       float64
		title        string
	}{
		{"bar", "0", 0, "0 due 10:00:00–10:05:00 UTC"},
		{"bar", "5", plot / 2, "5 due 10:05:00–10:10:00 UTC"},
		{"bar peak", "10", plot, "10 due 10:10:00–10:15:00 UTC"},
		{"bar", "1", plot / 10, "1 due 10:15:00–10:20:00 UTC"},
		{"bar", "0", 0, "0 due 10:20:00–10:25:00 UTC"},
	} {
		assert.Equal(t, want.class, bars[k][1], k)
		assert.Equal(t, want.count, bars[k][2], k)
		h, err := strconv.ParseFloat(bars[k][3], 64)
		require.NoError(t, err)
		assert.InDelta(t, want.height, h, 0.1, k)
		assert.Equal(t, want.title, bars[k][4], k)
	}
	assert.Contains(t, svg, `>now</text>`)
	assert.Contains(t, svg, `>+25m</text>`)
	assert.Contains(t, svg, `>peak 10 per 5m</text>`)
	assert.Contains(t, svg, `aria-label="16 messages fall due in the next 25m; the most, 10, in the 5m from +10m"`)
	assert.NotContains(t, svg, "style=", "the policy allows no inline style")
	assert.NotContains(t, svg, "<script")
}

func TestForecastChartOfNothingDueHasFlatBarsAndNoPeak(t *testing.T) {
	svg := string(forecastChart(make([]int64, 24), time.Now(), time.Hour))
	assert.Len(t, regexp.MustCompile(`<rect class="bar" data-count="0" [^>]* height="0.0">`).FindAllString(svg, -1), 24)
	assert.NotContains(t, svg, "peak")
	assert.Contains(t, svg, `>+12h</text>`)
	assert.Contains(t, svg, `>+24h</text>`)
}

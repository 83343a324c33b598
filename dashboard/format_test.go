package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseDueTakesExactlyOneOfATimeAndADelay(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		at, after string
		want      time.Time
		err       bool
	}{
		{after: "90s", want: now.Add(90 * time.Second)},
		{after: " 0s ", want: now},
		{after: "-1m", err: true},
		{after: "soon", err: true},
		{at: "2031-05-06T07:08:09Z", want: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)},
		{at: "2031-05-06T09:08:09.5+02:00", want: time.Date(2031, 5, 6, 7, 8, 9, 5e8, time.UTC)},
		{at: "2031-05-06T07:08:09", want: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)},
		{at: "2031-05-06T07:08", want: time.Date(2031, 5, 6, 7, 8, 0, 0, time.UTC)},
		{at: "tomorrow", err: true},
		{at: "2031-05-06T07:08", after: "1m", err: true},
		{err: true},
	} {
		got, err := parseDue(c.at, c.after, now)
		if c.err {
			assert.Error(t, err, "%+v", c)
			continue
		}
		if assert.NoError(t, err, "%+v", c) {
			assert.True(t, c.want.Equal(got), "%+v: got %s", c, got)
		}
	}
}

func TestFormatPayloadIndentsJSONAndDumpsBinary(t *testing.T) {
	for _, c := range []struct {
		in, want, kind string
	}{
		{`{"a":[1,2]}`, "{\n  \"a\": [\n    1,\n    2\n  ]\n}", "JSON"},
		{`"just a string"`, `"just a string"`, "JSON"},
		{"not {json", "not {json", "text"},
		{"", "", "text"},
		{"\xff\x00ab", "00000000  ff 00 61 62                                       |..ab|\n", "binary (hex dump)"},
	} {
		got, kind := formatPayload([]byte(c.in))
		assert.Equal(t, c.want, got, c.in)
		assert.Equal(t, c.kind, kind, c.in)
	}
}

func TestShortDurationKeepsAboutThreeFigures(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1234567 * time.Microsecond: "1.23s",
		245 * time.Second:          "4m5s",
		823456 * time.Nanosecond:   "823.456µs",
		12345 * time.Microsecond:   "12.35ms",
		0:                          "0s",
	} {
		assert.Equal(t, want, shortDuration(d), d.String())
	}
}

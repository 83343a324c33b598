package schedule

// This file owns the definition of a periodic schedule: Schedule, its policies, its
// validation and the tick times its spec gives (robfig/cron/v3's parser) in its time zone.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/robfig/cron/v3"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Schedule is a periodic schedule: at each tick of Spec, in TimeZone, one message with Payload
// and Metadata is published to Topic, exactly once however many Schedulers run (see
// Scheduler). Each tick's message carries the schedule's name
// (redisdelay.ScheduleMetadataKey), the tick's nominal time (redisdelay.TickTimeMetadataKey) and
// a message key derived from both (TickKey), so the Inspector finds it by key and a tick that
// is acted on twice is stored once.
type Schedule struct {
	// Name names the schedule: unique per key prefix, a valid name (see ValidateName) of at
	// most MaxNameLength bytes.
	Name string
	// Spec is when it ticks: a cron spec of 5 fields (minute hour day-of-month month
	// day-of-week) or 6 with seconds first, "@every <Go duration>" (at least 1 s, counted from
	// the previous tick), or one of @yearly, @monthly, @weekly, @daily, @hourly, as
	// robfig/cron/v3's parser reads them; at most MaxSpecLength bytes. Time zone
	// prefixes (TZ=, CRON_TZ=) are refused: use TimeZone. A spec that names no existing day
	// ("0 0 30 2 *") is refused; ticks are searched at most Horizon ahead.
	Spec string
	// TimeZone is the IANA name of the time zone the spec is read in ("Europe/Berlin"), at most
	// MaxTimeZoneLength bytes; UTC when empty. "Local" is refused: each host would read the
	// schedule in its own zone. Daylight-saving, for a spec that names hours (its hour field is
	// not "*"): a tick whose wall time does not exist that day (the spring-forward gap) fires
	// once, at the end of the gap; a wall time that happens twice (fall-back) fires once, at its
	// first instance. A spec whose hour field is "*", and @every, follow elapsed time. See
	// docs/schedules.md.
	TimeZone string
	// Topic is the topic each tick's message is published to: a valid topic name.
	Topic string
	// Payload and Metadata are each tick's message's. Metadata keys may not start with
	// redisdelay.ReservedMetadataPrefix.
	Payload  message.Payload
	Metadata message.Metadata
	// Overlap decides what happens when a tick falls due while the previous tick's message is
	// still held (due or in flight) by a consumer group of Topic; OverlapAllowAll when empty.
	Overlap OverlapPolicy
	// CatchUp decides which ticks missed while no Scheduler ran are published once one runs
	// again, of those within CatchUpWindow; CatchUpAll when empty.
	CatchUp CatchUpPolicy
	// CatchUpWindow is how late (Redis clock now minus the nominal tick time) a tick may be and
	// still be published; later ticks are skipped and counted. DefaultCatchUpWindow when 0.
	CatchUpWindow time.Duration
	// Jitter is the most by which each tick's message is delayed after its nominal time, a
	// random delay from 0 to Jitter drawn per tick, never negative; 0 for none. It must be less
	// than the catch-up window.
	Jitter time.Duration
}

// OverlapPolicy is what a Scheduler does with a tick that falls due while the message of the
// schedule's previous published tick is still held, due or in flight, by some consumer group
// of its topic. The names are Temporal's schedule overlap policies.
type OverlapPolicy string

const (
	// OverlapAllowAll publishes every tick. The default.
	OverlapAllowAll OverlapPolicy = "allow-all"
	// OverlapSkip skips the tick, counted as skipped (outcome TickSkippedOverlap).
	OverlapSkip OverlapPolicy = "skip"
	// OverlapBufferOne holds the tick back until the previous message is finished in every
	// group (acked, dead-lettered or cancelled), then publishes it (outcome TickBuffered, then
	// TickPublishedBuffered); a tick that falls due while one is held back is skipped. The held
	// tick is rechecked every Config.BufferRecheckInterval.
	OverlapBufferOne OverlapPolicy = "buffer-one"
)

// CatchUpPolicy is which of the ticks missed while no Scheduler ran, and still within the
// catch-up window, are published when one runs again. Older ticks are skipped and counted
// either way.
type CatchUpPolicy string

const (
	// CatchUpAll publishes every missed tick within the window, up to MaxCatchUpTicks, each
	// with its own nominal time, oldest first. The default.
	CatchUpAll CatchUpPolicy = "all"
	// CatchUpLatest publishes only the latest missed tick within the window.
	CatchUpLatest CatchUpPolicy = "latest"
)

const (
	// DefaultCatchUpWindow is Schedule.CatchUpWindow when it is 0.
	DefaultCatchUpWindow = time.Minute
	// MaxCatchUpTicks bounds the ticks one catch-up publishes; the others are skipped.
	MaxCatchUpTicks = 1000
	// MaxNameLength is the longest schedule name, in bytes.
	MaxNameLength = 200
	// MaxSpecLength is the longest Schedule.Spec, in bytes.
	MaxSpecLength = 256
	// MaxTimeZoneLength is the longest Schedule.TimeZone, in bytes (the longest IANA name has
	// 32).
	MaxTimeZoneLength = 64
	// maxTickScan bounds the ticks a catch-up steps through (a 1-second schedule after about 28
	// hours down); past it, the ticks are skipped without being counted one by one.
	maxTickScan = 100_000
)

// cronParser reads specs as Schedule.Spec documents.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// scheduleDef is a Schedule as Redis stores it (the def field of its state hash), JSON.
// Durations are in ms.
type scheduleDef struct {
	Spec          string            `json:"spec"`
	TimeZone      string            `json:"tz,omitempty"`
	Topic         string            `json:"topic"`
	Payload       []byte            `json:"payload,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Overlap       OverlapPolicy     `json:"overlap"`
	CatchUp       CatchUpPolicy     `json:"catch_up"`
	CatchUpWindow int64             `json:"catch_up_window_ms"`
	Jitter        int64             `json:"jitter_ms,omitempty"`
}

// compiledSchedule is a definition with its parsed spec and time zone.
type compiledSchedule struct {
	Schedule
	cron  cron.Schedule
	ticks *specTicks // nil for @every
	loc   *time.Location
}

// scheduleError names the schedule and the offending field of a bad definition.
func scheduleError(name, field string, value any, err error) error {
	return fmt.Errorf("schedule: %w %s: %s %v: %w", ErrInvalid, store.Quote(name), field, value, err)
}

// compile validates s, fills in its defaults and parses its spec. Errors wrap
// ErrInvalid and name the schedule and the field.
func (s Schedule) compile() (*compiledSchedule, error) {
	if err := s.checkPutLimits(); err != nil {
		return nil, err
	}
	c, err := s.compileStored()
	if err == nil && c.ticks != nil {
		if err := checkTicksSomeDay(c.ticks.spec); err != nil {
			return nil, scheduleError(s.Name, "Spec", store.Quote(s.Spec), err)
		}
	}
	return c, err
}

// checkPutLimits applies the limits that Put added after definitions were stored without them
// (spec and zone lengths, "Local"; and a spec that names no existing day, checked by compile):
// a stored definition is read without them, so that one stored by an older version still
// lists and ticks (in its host's zone for "Local", until it is put again).
func (s Schedule) checkPutLimits() error {
	switch {
	case len(s.Spec) > MaxSpecLength:
		return scheduleError(s.Name, "Spec", store.Quote(s.Spec), fmt.Errorf("is %d bytes, more than %d", len(s.Spec), MaxSpecLength))
	case len(s.TimeZone) > MaxTimeZoneLength:
		return scheduleError(s.Name, "TimeZone", store.Quote(s.TimeZone), fmt.Errorf("is %d bytes, more than %d", len(s.TimeZone), MaxTimeZoneLength))
	case s.TimeZone == "Local":
		return scheduleError(s.Name, "TimeZone", store.Quote(s.TimeZone), errors.New("is each host's own zone, so Schedulers on different hosts would disagree: name an IANA zone such as \"Europe/Berlin\""))
	}
	return nil
}

// compileStored is compile without checkPutLimits.
func (s Schedule) compileStored() (*compiledSchedule, error) {
	if err := seam.CheckName("schedule", s.Name); err != nil {
		return nil, fmt.Errorf("schedule: %w: %w", ErrInvalid, err)
	}
	if len(s.Name) > MaxNameLength {
		return nil, scheduleError(s.Name, "Name of", fmt.Sprintf("%d bytes", len(s.Name)), fmt.Errorf("%w: more than %d", redisdelay.ErrInvalidName, MaxNameLength))
	}
	if err := seam.CheckName("topic", s.Topic); err != nil {
		return nil, scheduleError(s.Name, "Topic", store.Quote(s.Topic), err)
	}
	if s.Topic == TickTopic {
		return nil, scheduleError(s.Name, "Topic", store.Quote(s.Topic), errors.New("is the schedules' own tick topic"))
	}
	for k, v := range s.Metadata {
		if strings.HasPrefix(k, redisdelay.ReservedMetadataPrefix) {
			return nil, scheduleError(s.Name, "Metadata key", store.Quote(k), fmt.Errorf("starts with the reserved prefix %s (value %s)", redisdelay.ReservedMetadataPrefix, store.Quote(v)))
		}
	}
	if err := s.setPolicies(); err != nil {
		return nil, err
	}
	return s.parse()
}

// parse parses the spec and the time zone.
func (s Schedule) parse() (*compiledSchedule, error) {
	spec := strings.TrimSpace(s.Spec)
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, scheduleError(s.Name, "Spec", store.Quote(s.Spec), errors.New("has a time zone prefix: set TimeZone instead"))
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, scheduleError(s.Name, "Spec", store.Quote(s.Spec), err)
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		// robfig/cron rounds a shorter delay up to 1s; refusing it says so.
		if every, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && every < time.Second {
			return nil, scheduleError(s.Name, "Spec", store.Quote(s.Spec), errors.New("@every needs at least 1s"))
		}
	}
	loc := time.UTC
	if s.TimeZone != "" {
		if loc, err = time.LoadLocation(s.TimeZone); err != nil {
			return nil, scheduleError(s.Name, "TimeZone", store.Quote(s.TimeZone), err)
		}
	}
	s.Spec = spec
	c := &compiledSchedule{Schedule: s, cron: sched, loc: loc}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		const allHours = 1<<24 - 1
		c.ticks = &specTicks{spec: spec, loc: loc, fixedHours: spec.Hour&allHours != allHours}
	}
	return c, nil
}

// setPolicies checks the policies, the catch-up window and the jitter, filling in defaults.
func (s *Schedule) setPolicies() error {
	switch s.Overlap {
	case "":
		s.Overlap = OverlapAllowAll
	case OverlapAllowAll, OverlapSkip, OverlapBufferOne:
	default:
		return scheduleError(s.Name, "Overlap", store.Quote(string(s.Overlap)), errors.New(`want "allow-all", "skip" or "buffer-one"`))
	}
	switch s.CatchUp {
	case "":
		s.CatchUp = CatchUpAll
	case CatchUpAll, CatchUpLatest:
	default:
		return scheduleError(s.Name, "CatchUp", store.Quote(string(s.CatchUp)), errors.New(`want "all" or "latest"`))
	}
	if s.CatchUpWindow == 0 {
		s.CatchUpWindow = DefaultCatchUpWindow
	}
	switch {
	case s.CatchUpWindow < time.Millisecond:
		return scheduleError(s.Name, "CatchUpWindow", s.CatchUpWindow, errors.New("must be at least 1ms"))
	case s.Jitter < 0:
		return scheduleError(s.Name, "Jitter", s.Jitter, errors.New("is negative"))
	case s.Jitter >= s.CatchUpWindow:
		return scheduleError(s.Name, "Jitter", s.Jitter, fmt.Errorf("is not less than the catch-up window %s", s.CatchUpWindow))
	}
	return nil
}

// def is the stored form of the compiled schedule.
func (c *compiledSchedule) def() scheduleDef {
	return scheduleDef{
		Spec: c.Spec, TimeZone: c.TimeZone, Topic: c.Topic, Payload: c.Payload, Metadata: c.Metadata,
		Overlap: c.Overlap, CatchUp: c.CatchUp, CatchUpWindow: c.CatchUpWindow.Milliseconds(), Jitter: c.Jitter.Milliseconds(),
	}
}

// encode returns the stored form as JSON; json.Marshal sorts map keys, so an equal definition
// encodes to equal bytes.
func (c *compiledSchedule) encode() string {
	b, _ := json.Marshal(c.def())
	return string(b)
}

// decodeSchedule reads a stored definition of schedule name.
func decodeSchedule(name, data string) (*compiledSchedule, error) {
	var d scheduleDef
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		return nil, fmt.Errorf("schedule: schedule %s: stored definition unreadable: %w", store.Quote(name), err)
	}
	return Schedule{
		Name: name, Spec: d.Spec, TimeZone: d.TimeZone, Topic: d.Topic, Payload: d.Payload, Metadata: d.Metadata,
		Overlap: d.Overlap, CatchUp: d.CatchUp, CatchUpWindow: time.Duration(d.CatchUpWindow) * time.Millisecond, Jitter: time.Duration(d.Jitter) * time.Millisecond,
	}.compileStored()
}

// next returns the first tick after t, in ms precision, or the zero time when the spec has
// none within Horizon after t (see nextTick).
func (c *compiledSchedule) next(t time.Time) time.Time {
	n, _ := c.nextTick(t)
	return n
}

// nextTick returns the first tick after t, in ms precision, or an error wrapping
// ErrInvalid when there is none within Horizon after t. Across daylight-saving
// changes it keeps what cron users expect of a spec with fixed hours (its hour field is not
// "*"): a tick whose wall time falls in a spring-forward gap fires once, at the end of the gap;
// a wall time that happens twice at a fall-back fires once, at its first instance. A spec
// whose hour field is "*", and @every, follow elapsed time: each real hour is one.
func (c *compiledSchedule) nextTick(t time.Time) (time.Time, error) {
	var n time.Time
	ok := false
	if c.ticks != nil {
		n, ok = c.ticks.next(t)
	} else { // @every: robfig/cron's ConstantDelaySchedule adds the delay, in O(1)
		n = c.cron.Next(t.In(c.loc))
		ok = !n.IsZero()
	}
	if !ok {
		return time.Time{}, scheduleError(c.Name, "Spec", store.Quote(c.Spec)+" in "+c.zoneName(), fmt.Errorf("has no tick within Horizon (%s) after %s", Horizon, t.UTC().Format(time.RFC3339)))
	}
	return n.Truncate(time.Millisecond), nil
}

// zoneName names the schedule's time zone for errors.
func (c *compiledSchedule) zoneName() string {
	if c.TimeZone == "" {
		return "UTC"
	}
	return c.TimeZone
}

// NextTicks returns the first n nominal tick times after t (absolute instants, in the
// schedule's time zone). Each tick is searched for at most Horizon ahead, so the call
// is bounded whatever the spec and zone. Errors wrap ErrInvalid: a definition Put
// would refuse, or no tick within Horizon after t or after one of the ticks found.
func (s Schedule) NextTicks(t time.Time, n int) ([]time.Time, error) {
	c, err := s.compile()
	if err != nil {
		return nil, err
	}
	ticks, err := c.nextTicks(t, n)
	if err != nil {
		return nil, err
	}
	return ticks, nil
}

// nextTicks returns the first n ticks after t, and those found before a search that found none.
func (c *compiledSchedule) nextTicks(t time.Time, n int) ([]time.Time, error) {
	var ticks []time.Time
	for len(ticks) < n {
		next, err := c.nextTick(t)
		if err != nil {
			return ticks, err
		}
		t = next
		ticks = append(ticks, t)
	}
	return ticks, nil
}

// TickKey returns the message key of schedule name's tick at nominal time tick: the name, "@"
// and the time in UTC, RFC 3339 with milliseconds ("nightly@2026-03-29T01:00:00.000Z").
func TickKey(name string, tick time.Time) string {
	return name + "@" + tick.UTC().Format(tickKeyLayout)
}

const tickKeyLayout = "2006-01-02T15:04:05.000Z07:00"

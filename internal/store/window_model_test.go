package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestRandomSequencesKeepTheWindowsCopiesApart runs random sequences of publishes (small and
// large plain messages, keyed ones, mixed calls), registrations, claims, acks, nacks, group
// removals and window closings on one topic with the new-group window open, and checks what the
// window promises against a model: every group receives every message published while it was
// registered, and a group registering while the window is open also each message the window
// kept (published since the first group registered, or before any group, while the window
// held it); no group receives anything else; once every group has acked everything and the
// window's leftover is dropped, no message, count or parked member is left. A copy held twice
// without refs counting it would show as a message missing when the second holder claims it,
// or left behind at the end. REDISDELAY_WINDOW_SEED replays one sequence.
func TestRandomSequencesKeepTheWindowsCopiesApart(t *testing.T) {
	seed := time.Now().UnixNano()
	runs := 12
	if v, err := strconv.ParseInt(os.Getenv("REDISDELAY_WINDOW_SEED"), 10, 64); err == nil {
		seed, runs = v, 1
	}
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		for i := range runs {
			m := &windowModel{t: t, client: client, s: testStore(client), rng: rand.New(rand.NewPCG(uint64(seed)+uint64(i), 1)),
				part: Partition{Topic: fmt.Sprintf("window-model-%d-%d", seed, i)}, expected: map[string]map[string]bool{},
				received: map[string]map[string]bool{}, epochs: map[string]string{}, held: map[string][]Lease{}}
			m.cap = []int{1000, 12}[i%2]
			m.run(60)
			if t.Failed() {
				t.Fatalf("seed %d (replay with REDISDELAY_WINDOW_SEED=%d); ops:\n%s", uint64(seed)+uint64(i), uint64(seed)+uint64(i), strings.Join(m.log, "\n"))
			}
		}
	})
}

// windowModel is one sequence's model: which messages each group must receive, and what the
// window keeps for groups that register while it is open.
type windowModel struct {
	t      *testing.T
	client *redis.Client
	s      Store
	rng    *rand.Rand
	part   Partition
	cap    int
	log    []string

	next     int                        // messages published so far, naming the next one
	groups   []string                   // registered, in order
	gone     int                        // groups removed (their names are never used again)
	epochs   map[string]string          // of the registered groups
	expected map[string]map[string]bool // group -> the messages it must receive
	received map[string]map[string]bool // group -> the messages it received
	held     map[string][]Lease         // group -> leases it holds
	parked   []string                   // what a group gets that registers while the window is open
}

func (m *windowModel) run(ops int) {
	for range ops {
		switch n := m.rng.IntN(20); {
		case n < 6:
			m.publish()
		case n < 8:
			m.register()
		case n < 12:
			m.claim()
		case n < 15:
			m.ack()
		case n < 17:
			m.nack()
		case n < 18:
			m.remove()
		case n < 19:
			m.closeWindow()
		}
		if m.t.Failed() {
			return
		}
	}
	m.drain()
}

func (m *windowModel) windowOpen() bool {
	return m.client.Exists(context.Background(), m.s.keys.topic(m.part).window).Val() == 1
}

func (m *windowModel) publish() {
	var msgs []Outgoing
	var names []string
	for range 1 + m.rng.IntN(4) {
		m.next++
		name := "m" + strconv.Itoa(m.next)
		o := Outgoing{Data: []byte(name)}
		switch k := m.rng.IntN(10); {
		case k == 0:
			o.Data = []byte(name + "|" + strings.Repeat("x", 1100))
		case k < 3:
			o.KeySpec = KeySpec(KeepExisting, 0, 0, "k"+name)
		}
		msgs = append(msgs, o)
		names = append(names, name)
	}
	open := m.windowOpen()
	m.log = append(m.log, fmt.Sprintf("publish %v (groups %v, window open %v)", names, m.groups, open))
	letters, err := m.s.Publish(context.Background(), m.part, testCall(), m.groups, msgs)
	require.NoError(m.t, err)
	require.Equal(m.t, strings.Repeat("s", len(msgs)), letters)
	for _, g := range m.groups {
		for _, name := range names {
			m.expected[g][name] = true
		}
	}
	switch {
	case len(m.groups) == 0:
		m.parked = append(m.parked, names...) // for the first group
	case open && m.windowOpen():
		m.parked = append(m.parked, names...)
	default:
		m.parked = nil // the call closed the window, or none was open
	}
}

func (m *windowModel) register() {
	name := "g" + strconv.Itoa(len(m.groups)+m.gone)
	open := m.windowOpen()
	epoch, _, err := m.s.RegisterGroup(context.Background(), m.part.Of(name), time.Minute, m.cap)
	require.NoError(m.t, err)
	first := len(m.groups) == 0
	m.log = append(m.log, fmt.Sprintf("register %s (first %v, window open %v, kept %d)", name, first, open, len(m.parked)))
	m.groups = append(m.groups, name)
	m.epochs[name] = epoch
	m.expected[name], m.received[name] = map[string]bool{}, map[string]bool{}
	if first || open && m.windowOpen() {
		for _, p := range m.parked {
			m.expected[name][p] = true
		}
	}
	if !m.windowOpen() {
		m.parked = nil
	}
}

func (m *windowModel) pick() (string, bool) {
	if len(m.groups) == 0 {
		return "", false
	}
	return m.groups[m.rng.IntN(len(m.groups))], true
}

func (m *windowModel) claim() {
	if g, ok := m.pick(); ok {
		m.claimFor(g, 1+m.rng.IntN(5))
	}
}

// claimFor claims up to limit messages for group g and returns how many it got.
func (m *windowModel) claimFor(g string, limit int) int {
	res, err := m.s.Claim(context.Background(), m.part.Of(g), m.epochs[g], testClaim(), limit, time.Minute, nil)
	require.NoError(m.t, err)
	require.Zero(m.t, res.Dropped, "%s: a claimed message's stored data vanished", g)
	var got []string
	for _, c := range res.Messages {
		name, _, _ := strings.Cut(string(c.Data), "|")
		got = append(got, name)
		require.True(m.t, m.expected[g][name], "%s received %s, which it must not", g, name)
		m.received[g][name] = true
		m.held[g] = append(m.held[g], c.Lease)
	}
	m.log = append(m.log, fmt.Sprintf("claim %s: %v", g, got))
	return len(res.Messages)
}

func (m *windowModel) ack() {
	g, ok := m.pick()
	if !ok || len(m.held[g]) == 0 {
		return
	}
	n := 1 + m.rng.IntN(len(m.held[g]))
	refused, err := m.s.Ack(context.Background(), m.part.Of(g), m.epochs[g], m.held[g][:n])
	require.NoError(m.t, err)
	require.Empty(m.t, refused)
	m.log = append(m.log, fmt.Sprintf("ack %s: %d", g, n))
	m.held[g] = m.held[g][n:]
}

func (m *windowModel) nack() {
	g, ok := m.pick()
	if !ok || len(m.held[g]) == 0 {
		return
	}
	l := m.held[g][0]
	require.NoError(m.t, m.s.Nack(context.Background(), m.part.Of(g), m.epochs[g], l, 0, nil))
	m.log = append(m.log, fmt.Sprintf("nack %s: %s", g, l.ID))
	m.held[g] = m.held[g][1:]
}

func (m *windowModel) remove() {
	g, ok := m.pick()
	if !ok {
		return
	}
	m.log = append(m.log, "remove "+g)
	ctx := context.Background()
	for first := true; ; first = false {
		_, _, left, err := m.s.RemoveGroup(ctx, m.part.Of(g), first, 7)
		require.NoError(m.t, err)
		if left == 0 {
			break
		}
	}
	m.groups = slices.DeleteFunc(m.groups, func(x string) bool { return x == g })
	m.gone++
	delete(m.expected, g)
	delete(m.received, g)
	delete(m.held, g)
	if len(m.groups) == 0 {
		m.parked = nil // the removal of the last group ends the window and drops what it kept
	}
}

// closeWindow ends the window as its expiry does, and drops what it left as a subscription does.
func (m *windowModel) closeWindow() {
	ctx := context.Background()
	window := m.s.keys.topic(m.part).window
	m.log = append(m.log, "close the window")
	m.client.Del(ctx, window) // as it expires: miniredis's clock does not run by itself
	for range 1000 {
		left, _, err := m.s.CloseWindow(ctx, m.part)
		require.NoError(m.t, err)
		if left == 0 {
			break
		}
	}
	if len(m.groups) > 0 {
		m.parked = nil
	}
}

// drain acks what is held, claims and acks the rest in every group, checks each group received
// what the model says, and checks that nothing is left once the window's leftover is dropped.
func (m *windowModel) drain() {
	ctx := context.Background()
	for _, g := range m.groups {
		for {
			if len(m.held[g]) > 0 {
				refused, err := m.s.Ack(ctx, m.part.Of(g), m.epochs[g], m.held[g])
				require.NoError(m.t, err)
				require.Empty(m.t, refused)
				m.held[g] = nil
			}
			if m.claimFor(g, 50) == 0 {
				break
			}
		}
		require.Equal(m.t, m.expected[g], m.received[g], "what %s received", g)
	}
	if len(m.groups) == 0 {
		return // what was published meanwhile waits for a first group
	}
	m.closeWindow()
	tk := m.s.keys.topic(m.part)
	for _, key := range []string{tk.messages, tk.refs, tk.parked} {
		require.Zero(m.t, m.client.Exists(ctx, key).Val(), "%s is left: %v", key, m.client.Type(ctx, key).Val())
	}
}

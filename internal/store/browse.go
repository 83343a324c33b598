package store

import (
	"context"
	"fmt"
	"strconv"
)

// browse.go owns reading messages for the operator without changing them: a page of a set, one
// message, and the whole members that short forms name.

// Listed is one message of a List or Show reply.
type Listed struct {
	// Member is the member's name, or in a List, for a member that holds its message
	// (ID|message), its short form "ID|" (see lua/lib/position.lua).
	Member  string
	ScoreUs int64  // due time or lease deadline, Unix µs on the Redis clock
	Size    int    // of the stored message in bytes, -1 when it has vanished
	Data    []byte // its first bytes (List) or all of it (Show); nil when vanished
	Leased  bool   // Show: found in the lease set
}

// Cursor is the position after which a List page starts: a score and a member. The zero Cursor
// starts at the beginning.
type Cursor struct {
	ScoreUs int64
	Member  string
	// After is set for a cursor after a message; unset, the page starts at the beginning.
	After bool
}

// List runs list.lua on the span of set after the cursor: at most limit messages, prefix
// bytes of each, and no more stored messages than budget bytes after the first. It returns the
// page, the Redis time, and whether the page ended for the budget.
func (s Store) List(ctx context.Context, set Set, span Span, after Cursor, limit, prefix, budget int) ([]Listed, int64, bool, error) {
	cursor := ""
	if after.After {
		cursor = strconv.FormatInt(after.ScoreUs, 10)
	}
	keys := []string{s.keys.set(set), s.keys.topic(set.Group.Partition).messages}
	res, err := s.run(ctx, s.client, listScript, keys, string(span), cursor, after.Member, limit, prefix, budget)
	if err != nil {
		return nil, 0, false, err
	}
	r, _ := res.([]any)
	if len(r) < 2 || (len(r)-2)%4 != 0 {
		return nil, 0, false, fmt.Errorf("script %s: unexpected reply of %d values", listScript.name, len(r))
	}
	out := make([]Listed, 0, (len(r)-2)/4)
	for i := 2; i < len(r); i += 4 {
		m, _ := r[i].(string)
		l := Listed{Member: m, ScoreUs: asInt(r[i+1]), Size: int(asInt(r[i+2]))}
		if d, ok := r[i+3].(string); ok && l.Size >= 0 {
			l.Data = []byte(d)
		} else {
			l.Size = -1
		}
		out = append(out, l)
	}
	return out, asInt(r[0]), asInt(r[1]) == 1, nil
}

// Show runs show.lua: the message that ref names in set, a group's due set (its lease set is
// searched too) or a parked set. ok is false when neither holds it. The Listed member is the
// whole member. It also returns the Redis time.
func (s Store) Show(ctx context.Context, set Set, ref Ref) (_ Listed, nowUs int64, ok bool, _ error) {
	score := ""
	if ref.Short {
		score = strconv.FormatInt(ref.ScoreUs, 10)
	}
	due := s.keys.set(set)
	lease := due
	if set.Kind == DueSet {
		lease = s.keys.set(Leases(set.Group))
	}
	res, err := s.run(ctx, s.client, showScript, []string{due, lease, s.keys.topic(set.Group.Partition).messages}, ref.Member, score)
	if err != nil {
		return Listed{}, 0, false, err
	}
	r, _ := res.([]any)
	if len(r) == 1 {
		return Listed{}, asInt(r[0]), false, nil
	}
	if len(r) != 5 {
		return Listed{}, 0, false, unexpected(showScript, res)
	}
	where, _ := r[1].(string)
	whole, _ := r[4].(string)
	l := Listed{Member: whole, ScoreUs: asInt(r[2]), Leased: where == "lease", Size: -1}
	if d, ok := r[3].(string); ok {
		l.Data, l.Size = []byte(d), len(d)
	}
	return l, asInt(r[0]), true, nil
}

// Resolve runs resolve.lua on set: the whole member of each short form (shorts[i], scored
// scoresUs[i]), "" where the set holds none.
func (s Store) Resolve(ctx context.Context, set Set, shorts []string, scoresUs []int64) ([]string, error) {
	args := make([]any, 0, 2*len(shorts))
	for i, m := range shorts {
		args = append(args, m, scoresUs[i])
	}
	res, err := s.run(ctx, s.client, resolveScript, []string{s.keys.set(set)}, args...)
	if err != nil {
		return nil, err
	}
	r, _ := res.([]any)
	if len(r) != len(shorts) {
		return nil, fmt.Errorf("script %s: unexpected reply of %d values for %d", resolveScript.name, len(r), len(shorts))
	}
	out := make([]string, len(r))
	for i, v := range r {
		out[i], _ = v.(string)
	}
	return out, nil
}

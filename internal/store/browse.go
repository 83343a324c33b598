package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	// Far is set for a message of the group's compact tier (see lua/lib/far.lua), whose ref
	// carries its due time (see MakeTierRef).
	Far bool
}

// Cursor is the position after which a List page starts: a score and a member, or in a
// group's compact tier a member that farCursor starts and the last due time listed. The zero
// Cursor starts at the beginning.
type Cursor struct {
	ScoreUs int64
	Member  string
	// After is set for a cursor after a message; unset, the page starts at the beginning.
	After bool
}

// List runs list.lua on the span of set after the cursor: at most limit messages, prefix
// bytes of each, and no more stored messages than budget bytes after the first. For the Later
// span of a due set, the group's compact tier follows its due set (listfar.lua, called when
// the due set has no more). It returns the page, the cursor after it, and whether the page
// ended for the budget.
func (s Store) List(ctx context.Context, set Set, span Span, after Cursor, limit, prefix, budget int) ([]Listed, Cursor, bool, error) {
	tier := set.Kind == DueSet && span == Later
	inTier := strings.HasPrefix(after.Member, farCursor)
	if inTier && !tier {
		return nil, after, false, fmt.Errorf("cursor %q of the compact tier for span %s of a set that is not a due set", after.Member, span)
	}
	var rows []Listed
	if !inTier {
		var cut bool
		var err error
		rows, cut, err = s.listSet(ctx, set, span, after, limit, prefix, budget)
		if len(rows) > 0 {
			after = Cursor{ScoreUs: rows[len(rows)-1].ScoreUs, Member: rows[len(rows)-1].Member, After: true}
		}
		if err != nil || !tier || cut || len(rows) == limit {
			return rows, after, cut, err
		}
		for _, r := range rows {
			budget -= max(r.Size, 0)
		}
		if budget <= 0 {
			return rows, Cursor{ScoreUs: after.ScoreUs, Member: farCursor, After: true}, true, nil
		}
		after = Cursor{Member: farCursor, After: true}
	}
	more, next, cut, err := s.listFar(ctx, set.Group, after, limit-len(rows), prefix, budget)
	return append(rows, more...), next, cut, err
}

// farCursor starts the member of a Cursor in a group's compact tier: "far", then for a
// position in a bucket " ", the bucket's move time (µs), " ", the position after the last
// message listed, " " and the bucket. No member starts so (see ids.go).
const farCursor = "far"

// listSet runs list.lua on the span of set after the cursor (see List).
func (s Store) listSet(ctx context.Context, set Set, span Span, after Cursor, limit, prefix, budget int) ([]Listed, bool, error) {
	cursor := ""
	if after.After {
		cursor = strconv.FormatInt(after.ScoreUs, 10)
	}
	keys := []string{s.keys.set(set), s.keys.topic(set.Group.Partition).messages}
	res, err := s.run(ctx, s.client, listScript, keys, string(span), cursor, after.Member, limit, prefix, budget)
	if err != nil {
		return nil, false, err
	}
	r, _ := res.([]any)
	if len(r) < 2 || (len(r)-2)%4 != 0 {
		return nil, false, fmt.Errorf("script %s: unexpected reply of %d values", listScript.name, len(r))
	}
	return listedRows(r[2:], false), asInt(r[1]) == 1, nil
}

// listFar runs listfar.lua on the compact tier of group g after the cursor, a farCursor.
func (s Store) listFar(ctx context.Context, g Group, after Cursor, limit, prefix, budget int) ([]Listed, Cursor, bool, error) {
	moveUs, pos, bucket := "", "0", ""
	if f := strings.SplitN(after.Member, " ", 4); len(f) == 4 {
		moveUs, pos, bucket = f[1], f[2], f[3]
	} else if after.Member != farCursor {
		return nil, after, false, fmt.Errorf("malformed cursor %q of the compact tier", after.Member)
	}
	keys := []string{s.keys.group(g).far, s.keys.topic(g.Partition).messages}
	res, err := s.run(ctx, s.client, listFarScript, keys, moveUs, bucket, pos, limit, prefix, budget)
	if err != nil {
		return nil, after, false, err
	}
	r, _ := res.([]any)
	if len(r) < 5 || (len(r)-5)%4 != 0 {
		return nil, after, false, fmt.Errorf("script %s: unexpected reply of %d values", listFarScript.name, len(r))
	}
	rows := listedRows(r[5:], true)
	if b, _ := r[2].(string); b != "" {
		m := fmt.Sprintf("%s %d %d %s", farCursor, asInt(r[3]), asInt(r[4]), b)
		after = Cursor{ScoreUs: rows[len(rows)-1].ScoreUs, Member: m, After: true}
	}
	return rows, after, asInt(r[1]) == 1, nil
}

// listedRows decodes the rows of a list.lua or listfar.lua reply: member, score, size, first
// bytes; far for the compact tier's.
func listedRows(r []any, far bool) []Listed {
	out := make([]Listed, 0, len(r)/4)
	for i := 0; i+3 < len(r); i += 4 {
		m, _ := r[i].(string)
		l := Listed{Member: m, ScoreUs: asInt(r[i+1]), Size: int(asInt(r[i+2])), Far: far}
		if d, ok := r[i+3].(string); ok && l.Size >= 0 {
			l.Data = []byte(d)
		} else {
			l.Size = -1
		}
		out = append(out, l)
	}
	return out
}

// Show runs show.lua: the message that ref names in set, a group's due set (its lease set is
// searched too, then for a ref with a score its compact tier, see far_find) or a parked set. ok
// is false when none holds it. The Listed member is the whole member. It also returns the
// Redis time.
func (s Store) Show(ctx context.Context, set Set, ref Ref) (_ Listed, nowUs int64, ok bool, _ error) {
	score, farUs := "", ""
	if ref.Short {
		score = strconv.FormatInt(ref.ScoreUs, 10)
	}
	due := s.keys.set(set)
	lease, far := due, due
	if set.Kind == DueSet {
		lease, far = s.keys.set(Leases(set.Group)), s.keys.group(set.Group).far
		if ref.Short || ref.Dated {
			farUs = strconv.FormatInt(ref.ScoreUs, 10)
		}
	}
	res, err := s.run(ctx, s.client, showScript, []string{due, lease, s.keys.topic(set.Group.Partition).messages, far}, ref.Member, score, farUs)
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
	l := Listed{Member: whole, ScoreUs: asInt(r[2]), Leased: where == "lease", Far: where == "far", Size: -1}
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

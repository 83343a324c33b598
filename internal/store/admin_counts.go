package store

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// admin_counts.go counts the members of a due or parked set by due time for the Inspector's
// forecast (CountByDue): the set itself by ZCOUNT, and a group's compact tier bucket by bucket.

// DueCounts is how the members of a due or parked set spread over due time, as CountByDue
// counts them. Times are Unix µs on the Redis clock.
type DueCounts struct {
	// Before are the members due before the first bucket; Buckets[k] those due within bucket
	// k; After those due from the end of the last bucket on.
	Before  int64
	Buckets []int64
	After   int64
	// FirstUs is the earliest due time in the set; FirstFromUs the earliest at or after the
	// start of the first bucket; -1 when there is none.
	FirstUs, FirstFromUs int64
}

// CountByDue counts the members of set, a due or parked set, by due time: those before fromUs,
// those in each of n buckets [fromUs+k·widthUs, fromUs+(k+1)·widthUs), and those after the
// last; with the earliest due time and the earliest from fromUs. It sends n+4 commands of
// O(log N) each (ZCOUNT, ZRANGE and ZRANGEBYSCORE of one member) in one pipelined round trip.
// The counts are not one snapshot: each command sees the set as it is when it runs. Of a due
// set, the group's compact tier counts too (see countTier), in up to three more round trips;
// the earliest due times are the due set's only.
func (s Store) CountByDue(ctx context.Context, set Set, fromUs, widthUs int64, n int) (DueCounts, error) {
	if set.Kind == LeaseSet {
		return DueCounts{}, errors.New("count by due time: a lease set holds lease deadlines")
	}
	key := s.keys.set(set)
	bound := func(us int64) string { return strconv.FormatInt(us, 10) }
	return command(ctx, s, func(ctx context.Context) (DueCounts, error) {
		pipe := s.client.Pipeline()
		counts := make([]*redis.IntCmd, 0, n+2)
		counts = append(counts, pipe.ZCount(ctx, key, "-inf", "("+bound(fromUs)))
		for k := range int64(n) {
			counts = append(counts, pipe.ZCount(ctx, key, bound(fromUs+k*widthUs), "("+bound(fromUs+(k+1)*widthUs)))
		}
		counts = append(counts, pipe.ZCount(ctx, key, bound(fromUs+int64(n)*widthUs), "+inf"))
		first := pipe.ZRangeWithScores(ctx, key, 0, 0)
		firstFrom := pipe.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: bound(fromUs), Max: "+inf", Count: 1})
		if _, err := pipe.Exec(ctx); err != nil {
			return DueCounts{}, err
		}
		c := DueCounts{Before: counts[0].Val(), Buckets: make([]int64, n), After: counts[n+1].Val(), FirstUs: -1, FirstFromUs: -1}
		for k := range c.Buckets {
			c.Buckets[k] = counts[k+1].Val()
		}
		if z := first.Val(); len(z) == 1 {
			c.FirstUs = int64(z[0].Score)
		}
		if z := firstFrom.Val(); len(z) == 1 {
			c.FirstFromUs = int64(z[0].Score)
		}
		if set.Kind == DueSet {
			return c, s.countTier(ctx, s.keys.group(set.Group).far, fromUs, widthUs, &c)
		}
		return c, nil
	})
}

// MaxTierBucketsCounted bounds the compact-tier buckets CountByDue reads one by one; the
// messages of those after them count as due after the last bucket. MaxTierEntriesRead bounds
// the bucket entries it reads to place them exactly.
const (
	MaxTierBucketsCounted = 1000
	MaxTierEntriesRead    = 10000
)

// countTier adds the compact tier with index far to c. Each of its first MaxTierBucketsCounted
// time buckets counts by its length (LLEN): whole in the count bucket that holds its span (its
// start to its start plus the horizon it was written with, which its index score gives), or,
// when its span crosses count buckets, entry by entry by due time (LRANGE, up to
// MaxTierEntriesRead entries in all; a bucket's entries past that count at its start). The
// rest of the tier's messages count as due after the last count bucket. Three pipelined round
// trips at most.
func (s Store) countTier(ctx context.Context, far string, fromUs, widthUs int64, c *DueCounts) error {
	pipe := s.client.Pipeline()
	total := pipe.Get(ctx, far+":n")
	index := pipe.ZRangeWithScores(ctx, far, 0, MaxTierBucketsCounted-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	n, _ := total.Int64()
	if n == 0 {
		return nil
	}
	buckets := make([]tierBucket, 0, len(index.Val()))
	pipe = s.client.Pipeline()
	for _, z := range index.Val() {
		m, _ := z.Member.(string)
		start, err := strconv.ParseInt(m[strings.LastIndexByte(m, ':')+1:], 10, 64)
		if err != nil {
			continue
		}
		b := tierBucket{key: far + ":" + m, start: start, end: 2*start - int64(z.Score) - 1}
		b.len = pipe.LLen(ctx, b.key)
		buckets = append(buckets, b)
	}
	if _, err := pipe.Exec(ctx); err != nil && len(buckets) > 0 {
		return err
	}
	if err := s.readTierEntries(ctx, buckets, fromUs, widthUs); err != nil {
		return err
	}
	for _, b := range buckets {
		l := b.len.Val()
		n -= l
		if b.entries != nil {
			for _, e := range b.entries.Val() {
				c.place(b.start+tierOffset(e), 1, fromUs, widthUs)
			}
			l -= int64(len(b.entries.Val()))
		}
		c.place(b.start, l, fromUs, widthUs)
	}
	c.After += max(n, 0)
	return nil
}

// tierBucket is one time bucket of a compact tier as countTier reads it.
type tierBucket struct {
	key        string
	start, end int64 // the first and last µs of its span
	len        *redis.IntCmd
	entries    *redis.StringSliceCmd // read when its span crosses count buckets
}

// readTierEntries reads the entries of the buckets whose span crosses count buckets, up to
// MaxTierEntriesRead in all, in one pipelined round trip.
func (s Store) readTierEntries(ctx context.Context, buckets []tierBucket, fromUs, widthUs int64) error {
	pipe, read := s.client.Pipeline(), int64(0)
	for i := range buckets {
		b := &buckets[i]
		whole := (b.start-fromUs)/widthUs == (b.end-fromUs)/widthUs && (b.start < fromUs) == (b.end < fromUs)
		if l := b.len.Val(); !whole && read < MaxTierEntriesRead && l > 0 {
			b.entries = pipe.LRange(ctx, b.key, 0, min(l, MaxTierEntriesRead-read)-1)
			read += min(l, MaxTierEntriesRead-read)
		}
	}
	if read == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// place counts count messages due at dueUs in c, whose buckets start at fromUs, widthUs wide.
func (c *DueCounts) place(dueUs, count, fromUs, widthUs int64) {
	switch k := (dueUs - fromUs) / widthUs; {
	case dueUs < fromUs:
		c.Before += count
	case k < int64(len(c.Buckets)):
		c.Buckets[k] += count
	default:
		c.After += count
	}
}

// tierOffset reads a compact-tier bucket entry's offset from its bucket's start, µs: its first
// 5 bytes, big-endian (the format of lua/lib/far.lua's far_entry).
func tierOffset(entry string) int64 {
	var offset int64
	for i := 0; i < 5 && i < len(entry); i++ {
		offset = offset<<8 | int64(entry[i])
	}
	return offset
}

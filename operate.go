package redisdelay

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Operating a queue: the Inspector's topic registry, statistics, lists, pause and resume,
// removing a consumer group, requeueing dead letters and purging. Everything here uses O(1) or
// O(log N) commands per topic and group (plus O(M) for M listed or moved messages, a list
// cursor O(log² N)); nothing uses KEYS or SCAN, skips an offset, or sends more of a message
// than a preview unless that one message was asked for.

// registeredTopics remembers which topics a Publisher or Subscriber has written to the topic
// registry, so that each is written once per process (HSET). It holds at most maxCachedTopics
// topics; past that it starts again from empty.
type registeredTopics struct {
	mu   sync.Mutex
	seen map[string]bool
}

// ensure writes topic to the registry unless it did already. A failure is logged and tried
// again next time: the registry serves the Inspector only, never delivery.
func (r *registeredTopics) ensure(ctx context.Context, st store.Store, topic string, partitions int, logger watermill.LoggerAdapter) {
	r.mu.Lock()
	done := r.seen[topic]
	r.mu.Unlock()
	if done {
		return
	}
	if err := st.RegisterTopic(ctx, topic, partitions); err != nil {
		// Info, not Error: on a full Redis every publish would log it, and delivery is fine.
		logger.Info("Cannot add the topic to the topic registry yet; the Inspector finds it through its groups meanwhile", watermill.LogFields{"topic": topic, "err": err.Error()})
		return
	}
	r.mu.Lock()
	if r.seen == nil || len(r.seen) >= maxCachedTopics {
		r.seen = map[string]bool{}
	}
	r.seen[topic] = true
	r.mu.Unlock()
}

// TopicInfo describes one topic of the registry.
type TopicInfo struct {
	Topic string
	// Partitions is the partition count its publishers or subscribers were configured with.
	Partitions int
	// Groups are the consumer groups registered on any of its partitions, sorted.
	Groups []string
}

// Topics lists every topic that has been published to or subscribed under the key prefix
// (dead-letter topics included once a subscriber of their source topic started), sorted, with
// its partitions and consumer groups. It reads the topic registry (HGETALL) and each
// partition's group set (SMEMBERS). Errors: the Redis error, within OperationTimeout.
func (i *Inspector) Topics(ctx context.Context) ([]TopicInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	registry, err := i.store.RegisteredTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("redisdelay: read the topic registry: %w", err)
	}
	out := make([]TopicInfo, 0, len(registry))
	for topic, partitions := range registry {
		out = append(out, TopicInfo{Topic: topic, Partitions: max(partitions, 1)})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Topic < out[b].Topic })
	err = forEachConcurrently(ctx, len(out), func(ctx context.Context, n int) error {
		groups, err := i.groupsOf(ctx, out[n].Topic, out[n].Partitions)
		out[n].Groups = groups
		return err
	})
	return out, err
}

// topic returns the registry entry of topic, or an error wrapping ErrNotFound when it is
// neither in the registry nor has a consumer group.
func (i *Inspector) topic(ctx context.Context, topic string) (TopicInfo, error) {
	if err := ValidateName("topic", topic); err != nil {
		return TopicInfo{}, err
	}
	partitions, registered, err := i.store.RegisteredPartitions(ctx, topic)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("redisdelay: topic %s: %w", quote(topic), err)
	}
	// A topic missing from the registry (its entry was deleted, or its publishers predate it)
	// is still found through its groups, with the configured partitions.
	if !registered {
		partitions = i.config.Partitions
	}
	info := TopicInfo{Topic: topic, Partitions: max(partitions, 1)}
	info.Groups, err = i.groupsOf(ctx, topic, info.Partitions)
	if err == nil && !registered && len(info.Groups) == 0 {
		return TopicInfo{}, fmt.Errorf("redisdelay: topic %s: %w", quote(topic), ErrNotFound)
	}
	return info, err
}

// group returns the registry entry of topic after checking that group is registered on it,
// or an error wrapping ErrInvalidName or ErrNotFound.
func (i *Inspector) group(ctx context.Context, topic, group string) (TopicInfo, error) {
	if err := ValidateName("consumer group", group); err != nil {
		return TopicInfo{}, err
	}
	info, err := i.topic(ctx, topic)
	if err != nil {
		return info, err
	}
	for _, g := range info.Groups {
		if g == group {
			return info, nil
		}
	}
	return info, fmt.Errorf("redisdelay: consumer group %s on topic %s: %w", quote(group), quote(topic), ErrNotFound)
}

// groupOrParked is group, and for ParkedGroup checks that no group is registered on topic:
// then its messages wait in the parked sets. For ParkedGroup on a topic with a group, the
// error wraps ErrNotFound.
func (i *Inspector) groupOrParked(ctx context.Context, topic, group string) (TopicInfo, error) {
	if group != ParkedGroup {
		return i.group(ctx, topic, group)
	}
	info, err := i.topic(ctx, topic)
	if err == nil && len(info.Groups) > 0 {
		err = fmt.Errorf("redisdelay: topic %s has consumer groups, so no message waits parked for a first one: %w", quote(topic), ErrNotFound)
	}
	return info, err
}

// dueSet is the set that holds the messages of group g that are not in flight: its due set, or
// for ParkedGroup the partition's parked set.
func dueSet(g store.Group) store.Set {
	if g.Name == ParkedGroup {
		return store.Parked(g.Partition)
	}
	return store.Due(g)
}

// groupsOf returns the union of the groups registered on the partitions of topic, sorted.
func (i *Inspector) groupsOf(ctx context.Context, topic string, partitions int) ([]string, error) {
	set := map[string]bool{}
	for n := 0; n < partitions; n++ {
		groups, err := i.store.Groups(ctx, store.Partition{Topic: topic, N: n})
		if err != nil {
			return nil, fmt.Errorf("redisdelay: groups of topic %s: %w", quote(topic), err)
		}
		for _, g := range groups {
			set[g] = true
		}
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out, nil
}

// GroupStats counts one consumer group's messages on a topic, summed over its partitions. Times
// are on the Redis clock.
type GroupStats struct {
	Topic, Group string
	// Scheduled are due later; Due are due now and not claimed; InFlight are leased to a
	// consumer.
	Scheduled, Due, InFlight int64
	// DeadLetters are the group's dead letters that wait on its dead-letter topic
	// (DefaultDeadLetterTopic) for a first consumer group there: those List shows with
	// StateDeadLettered and Requeue moves back. Dead letters that a consumer group of the dead-letter
	// topic has taken are that group's messages, and a custom SubscriberConfig.DeadLetterTopic
	// is not seen here.
	DeadLetters int64
	// OldestDueAge is how long the oldest message that is due now has been due; 0 when none is.
	OldestDueAge time.Duration
	// NextDue is the earliest due time after now; zero when nothing is scheduled.
	NextDue time.Time
	// Paused is set while the group is paused (see Inspector.Pause).
	Paused bool
}

// A topic with no consumer group has one GroupStats from Stats, under ParkedGroup: Scheduled
// and Due count the messages that wait, parked, for its first group, OldestDueAge and NextDue
// are theirs, and the other counts are zero. The default dead-letter topic of a group that
// Stats reports has none: its parked messages are that group's DeadLetters.

// Stats returns the statistics of every consumer group of the given topics, or of every topic
// in the registry when none is given, sorted by topic and group; a topic with no group has one
// under ParkedGroup (see GroupStats). Each topic partition costs one script of O(log N)
// commands per group (ZCOUNT, ZCARD, ZRANGE of one element), run 16 at a time; the partitions
// of a topic with no group cost one pipelined round trip of four such commands each, after one
// TIME for the whole call.
// Errors: an error wrapping ErrNotFound for a topic not in the registry, or the Redis error,
// within OperationTimeout.
func (i *Inspector) Stats(ctx context.Context, topics ...string) ([]GroupStats, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	var infos []TopicInfo
	if len(topics) == 0 {
		all, err := i.Topics(ctx)
		if err != nil {
			return nil, err
		}
		infos = all
	}
	for _, t := range topics {
		info, err := i.topic(ctx, t)
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	stats, jobs, parked := planStats(infos)
	if err := i.parkedStats(ctx, parked); err != nil {
		return nil, err
	}
	if err := i.groupStats(ctx, jobs); err != nil {
		return nil, err
	}
	out := make([]GroupStats, len(stats))
	for n, st := range stats {
		out[n] = *st
	}
	return out, nil
}

// statsJob is the Stats of the groups of a topic that one partition adds to, with one script
// call for all of them.
type statsJob struct {
	stats     []*GroupStats
	partition int
}

// planStats returns the Stats to fill for the topics of infos, in order, and the reads that
// fill them: a statsJob per partition of a topic with groups, a parkedJob per partition of a
// topic without, unless it is the dead-letter topic of one of the groups.
func planStats(infos []TopicInfo) ([]*GroupStats, []statsJob, []parkedJob) {
	var stats []*GroupStats
	var jobs []statsJob
	var parked []parkedJob
	counted := map[string]bool{} // dead-letter topics whose messages are DeadLetters of a group
	for _, info := range infos {
		for _, g := range info.Groups {
			counted[DefaultDeadLetterTopic(info.Topic, g)] = true
		}
	}
	for _, info := range infos {
		switch {
		case len(info.Groups) == 0 && counted[info.Topic]:
		case len(info.Groups) == 0:
			st := &GroupStats{Topic: info.Topic, Group: ParkedGroup}
			stats = append(stats, st)
			for n := 0; n < info.Partitions; n++ {
				parked = append(parked, parkedJob{stats: st, partition: store.Partition{Topic: info.Topic, N: n}})
			}
		default:
			group := make([]*GroupStats, len(info.Groups))
			for k, g := range info.Groups {
				group[k] = &GroupStats{Topic: info.Topic, Group: g}
			}
			stats = append(stats, group...)
			for n := 0; n < info.Partitions; n++ {
				jobs = append(jobs, statsJob{stats: group, partition: n})
			}
		}
	}
	return stats, jobs, parked
}

// groupStats adds the counts of each job's partition to its stats.
func (i *Inspector) groupStats(ctx context.Context, jobs []statsJob) error {
	counts := make([][]store.GroupCounts, len(jobs))
	err := forEachConcurrently(ctx, len(jobs), func(ctx context.Context, n int) error {
		j := jobs[n]
		topic := j.stats[0].Topic
		groups, dead := make([]string, len(j.stats)), make([]store.Partition, len(j.stats))
		for k, st := range j.stats {
			groups[k] = st.Group
			dead[k] = store.Partition{Topic: DefaultDeadLetterTopic(topic, st.Group), N: j.partition}
		}
		var err error
		counts[n], err = i.store.Stats(ctx, store.Partition{Topic: topic, N: j.partition}, groups, dead)
		if err != nil {
			return fmt.Errorf("redisdelay: stats of topic %s: %w", quote(topic), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for n, j := range jobs {
		for k, c := range counts[n] {
			st := j.stats[k]
			st.Scheduled += c.Scheduled
			st.Due += c.Due
			st.InFlight += c.InFlight
			st.DeadLetters += c.Dead
			st.Paused = st.Paused || c.Paused
			if c.Due > 0 && c.HeadUs >= 0 {
				st.addOldest(c.NowUs, c.HeadUs)
			}
			st.addNextDue(c.NextDueUs)
		}
	}
	return nil
}

// addOldest counts a message due since headUs, at nowUs, in OldestDueAge.
func (st *GroupStats) addOldest(nowUs, headUs int64) {
	st.OldestDueAge = max(st.OldestDueAge, time.Duration(nowUs-headUs)*time.Microsecond)
}

// addNextDue counts a due time after now in NextDue; -1 for none.
func (st *GroupStats) addNextDue(us int64) {
	if us < 0 {
		return
	}
	if next := time.UnixMicro(us); st.NextDue.IsZero() || next.Before(st.NextDue) {
		st.NextDue = next
	}
}

// parkedJob is the Stats of a topic with no consumer group that one partition adds to.
type parkedJob struct {
	stats     *GroupStats
	partition store.Partition
}

// parkedStats adds the counts of the parked set of each job's partition to its stats, at one
// time of the Redis clock.
func (i *Inspector) parkedStats(ctx context.Context, jobs []parkedJob) error {
	if len(jobs) == 0 {
		return nil
	}
	nowUs, err := i.store.Clock(ctx)
	if err != nil {
		return fmt.Errorf("redisdelay: stats of parked messages: %w", err)
	}
	counts := make([]store.DueCounts, len(jobs))
	err = forEachConcurrently(ctx, len(jobs), func(ctx context.Context, n int) error {
		var err error
		counts[n], err = i.store.CountByDue(ctx, store.Parked(jobs[n].partition), nowUs, 1, 0)
		if err != nil {
			return fmt.Errorf("redisdelay: stats of topic %s: %w", quote(jobs[n].partition.Topic), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for n, c := range counts {
		st := jobs[n].stats
		st.Due += c.Before
		st.Scheduled += c.After
		if c.Before > 0 && c.FirstUs >= 0 {
			st.addOldest(nowUs, c.FirstUs)
		}
		st.addNextDue(c.FirstFromUs)
	}
	return nil
}

// Pause pauses consumer group on topic: its claims hand out nothing (acks of messages in
// flight are still confirmed), while messages keep being scheduled for it. Its subscriptions
// keep their channels open and sleep. Pausing a paused group is fine. Errors: an error wrapping
// ErrNotFound for an unknown topic or group, or the Redis error, within OperationTimeout.
func (i *Inspector) Pause(ctx context.Context, topic, group string) error {
	return i.setPaused(ctx, topic, group, true)
}

// Resume resumes a paused consumer group: its subscribers are woken and claim at once (within
// a round trip of the wake-up). Resuming a group that is not paused is fine. Errors as for
// Pause.
func (i *Inspector) Resume(ctx context.Context, topic, group string) error {
	return i.setPaused(ctx, topic, group, false)
}

func (i *Inspector) setPaused(ctx context.Context, topic, group string, paused bool) error {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return err
	}
	for n := 0; n < info.Partitions; n++ {
		if _, err := i.store.SetPaused(ctx, store.Partition{Topic: topic, N: n}.Of(group), paused); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("redisdelay: pause or resume group %s on topic %s: %w", quote(group), quote(topic), err)
		}
	}
	return nil
}

// removeGroupChunk is how many messages one removegroup.lua or purge.lua call drops, so that
// no call blocks Redis for long.
const removeGroupChunk = 1000

// RemoveGroup removes consumer group from topic with all its keys. Its first step, one script
// call per partition, unregisters the group at once, so publishes stop going to it (a publish
// that races the removal is refused by the publish script and retried without it, so it never
// brings the group back), and moves what the group held aside; then those messages are dropped,
// 1,000 per script call, each stored message once no other group holds it.
// Subscriptions of the group that still run stop at their next claim with ErrGroupRemoved
// (logged; their channel closes), and their acks are refused. A Subscribe of the group during
// or after the removal registers it again, empty: it receives what is published after its
// Subscribe returned, and the removal's later steps leave it alone. Its dead-letter topic is a
// topic of its own and stays. It returns how many messages were dropped. Errors: an error
// wrapping ErrNotFound for an unknown topic or group, or the Redis error; a call cut short by
// OperationTimeout can be repeated, and the repeat finishes dropping what the first moved aside.
func (i *Inspector) RemoveGroup(ctx context.Context, topic, group string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	if err := ValidateName("consumer group", group); err != nil {
		return 0, err
	}
	info, err := i.topic(ctx, topic)
	if err != nil {
		return 0, err
	}
	var dropped int64
	found := false
	for n := 0; n < info.Partitions; n++ {
		g := store.Partition{Topic: topic, N: n}.Of(group)
		for first := true; ; first = false {
			removed, d, left, err := i.store.RemoveGroup(ctx, g, first, removeGroupChunk)
			dropped += d
			if err != nil {
				return dropped, fmt.Errorf("redisdelay: remove group %s from topic %s: %w", quote(group), quote(topic), err)
			}
			found = found || removed || d > 0
			if left == 0 {
				break
			}
		}
	}
	i.groups.forget(topic, info.Partitions)
	if !found {
		return 0, fmt.Errorf("redisdelay: consumer group %s on topic %s: %w", quote(group), quote(topic), ErrNotFound)
	}
	return dropped, nil
}

// MessageInfo describes one message of a consumer group. Times are on the Redis clock.
type MessageInfo struct {
	Topic, Group string
	// Ref names the message in its group, partition included, as text safe for URLs, JSON and
	// command lines: give it to Message, CancelRef, RescheduleRef, RunNowRef and Requeue.
	Ref string
	// ID is the internal ID: 12 hex digits, then "=" and the key for a keyed message.
	ID   string
	UUID string
	// Key is the message's key, "" for none. A dead letter is stored without one: its Key is
	// the key it had (KeyMetadataKey), which operations by key no longer find.
	Key string
	// State is StateScheduled (DueAt may be past: due now), StateInFlight, or, for StateDeadLettered,
	// StateDeadLettered (DueAt is then when it was dead-lettered, on the Redis clock).
	State State
	DueAt time.Time // StateScheduled, StateDeadLettered
	// Attempt is the attempts so far (scheduled), the attempt under way (in flight), or the
	// attempts it had before it was dead-lettered (DeadLetterAttemptsMetadataKey; 0 for a
	// message published to the dead-letter topic without it).
	Attempt int
	// Reason is why a dead letter's last attempt failed (DeadLetterReasonMetadataKey, such as
	// DeadLetterReasonNacked); "" in the other states.
	Reason        string
	LeaseDeadline time.Time // StateInFlight
	Metadata      map[string]string
	PayloadSize   int
	// Preview is the payload's first PreviewLength bytes as text, with invalid UTF-8 and
	// control characters replaced by '.'.
	Preview string
	// Payload is the whole payload; only Message and MessageByKey fill it.
	Payload []byte
	// Vanished is set when the stored message is missing (evicted): only the member is known.
	Vanished bool
	// Partial is set by List when the message's UUID and metadata are longer than the
	// ListReadBytes it reads of each message, or its Unmarshaler is not
	// DefaultMarshalerUnmarshaler and the message is longer than that: UUID and Metadata hold
	// what fitted (with a custom Unmarshaler, nothing), PayloadSize is the stored message's
	// size and Preview is empty. Message reads the whole message.
	Partial bool
}

// PreviewLength is how many bytes of the payload MessageInfo.Preview shows.
const PreviewLength = 64

// ListReadBytes is how many bytes of each stored message List reads and Redis sends: with
// DefaultMarshalerUnmarshaler, enough for the UUID, about 2 KB of metadata and the preview.
// A page also ends early, with a NextCursor, once Redis has read 8 MiB of stored messages
// for it (a read copies a whole message inside Redis, though only its first bytes are sent).
const ListReadBytes = 2048

// listReadBudget bounds the bytes of stored messages one list.lua call reads inside Redis
// (each read copies the whole value), so that a page of large messages costs a few
// milliseconds at most; the first message of a page is read whatever its size.
const listReadBudget = 8 << 20

// DefaultListLimit and MaxListLimit bound ListOptions.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListOptions selects a page of List.
type ListOptions struct {
	State State
	// Cursor is ListPage.NextCursor of the previous page, "" for the first.
	Cursor string
	// Limit is the most messages on the page; DefaultListLimit when zero, at most
	// MaxListLimit.
	Limit int
}

// ListPage is one page of List.
type ListPage struct {
	Messages []MessageInfo
	// NextCursor continues after this page; "" when there is nothing more.
	NextCursor string
}

// List returns one page of the messages of consumer group on topic in the given state, in
// due-time (or lease-deadline) order, partition by partition, each with a preview: UUID,
// metadata, payload size and Preview decoded from the first ListReadBytes of the stored
// message (see MessageInfo.Partial), never the whole message. A cursor holds the last
// message's position, its due time and member: the next page starts after it in O(log² N)
// (ZCOUNT, ZRANK, a binary search among members of equal due time), never by skipping an
// offset, so a page costs the same with 1M messages of one due time, whatever the cursor says.
// Messages added or removed between pages do not shift the others; a message whose due time
// changes between pages may be missed or seen twice. A page may hold fewer than Limit messages
// and still have a NextCursor, when its messages are large (see ListReadBytes). For
// ParkedGroup, it lists the parked messages of a topic that has no consumer group, in
// StateScheduled or StateDue. Errors: an error wrapping ErrNotFound for an unknown topic or
// group (or ParkedGroup on a topic with a group), a bad cursor or state, or the Redis error,
// within OperationTimeout.
func (i *Inspector) List(ctx context.Context, topic, group string, opts ListOptions) (ListPage, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.groupOrParked(ctx, topic, group)
	if err != nil {
		return ListPage{}, err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	c, err := decodeCursor(opts.Cursor)
	if err != nil {
		return ListPage{}, fmt.Errorf("redisdelay: list topic %s: %w", quote(topic), err)
	}
	var page ListPage
	for p := c.partition; p < info.Partitions && len(page.Messages) < limit; p++ {
		set, span, err := listTarget(store.Partition{Topic: topic, N: p}.Of(group), opts.State)
		if err != nil {
			return ListPage{}, err
		}
		after := c.in(p)
		for len(page.Messages) < limit {
			want := min(limit-len(page.Messages), listCallLimit)
			rows, _, cut, err := i.store.List(ctx, set, span, after, want, ListReadBytes, listReadBudget)
			if err != nil {
				return ListPage{}, fmt.Errorf("redisdelay: list group %s on topic %s: %w", quote(group), quote(topic), err)
			}
			for _, r := range rows {
				m := i.describe(topic, group, p, r, opts.State == StateInFlight, false)
				if opts.State == StateDeadLettered {
					deadLettered(&m)
				}
				page.Messages = append(page.Messages, m)
			}
			if len(rows) > 0 {
				last := rows[len(rows)-1]
				after = store.Cursor{ScoreUs: last.ScoreUs, Member: last.Member, After: true}
			}
			if cut || len(page.Messages) == limit {
				page.NextCursor = encodeCursor(cursor{partition: p, at: after})
				return page, nil
			}
			if len(rows) < want {
				break // the partition has no more
			}
		}
	}
	return page, nil
}

// listCallLimit is the most messages one list.lua call returns; a page of more takes several
// calls, so that each stays within about a millisecond of Redis time.
const listCallLimit = 250

// listTarget returns the set, and the span of it, that hold the messages of group g in state;
// for ParkedGroup, the scheduled and due ones of the partition's parked set.
func listTarget(g store.Group, state State) (store.Set, store.Span, error) {
	switch {
	case state == StateScheduled:
		return dueSet(g), store.Later, nil
	case state == StateDue:
		return dueSet(g), store.DueNow, nil
	case g.Name == ParkedGroup:
		return store.Set{}, "", fmt.Errorf("redisdelay: list state %q of the parked messages of topic %s, want %s or %s", state, quote(g.Topic), StateScheduled, StateDue)
	case state == StateInFlight:
		return store.Leases(g), store.All, nil
	case state == StateDeadLettered:
		return store.Parked(deadLetterPartition(g)), store.All, nil
	}
	return store.Set{}, "", fmt.Errorf("redisdelay: unknown list state %q, want one of %v", state, listStates)
}

// deadLetterPartition is the partition of group g's default dead-letter topic where its dead
// letters wait.
func deadLetterPartition(g store.Group) store.Partition {
	return store.Partition{Topic: DefaultDeadLetterTopic(g.Topic, g.Name), N: g.N}
}

// describe turns a listed member into a MessageInfo, decoding the stored message from r.data:
// its first bytes (List) or all of it (Message, full).
func (i *Inspector) describe(topic, group string, partition int, r store.Listed, leased bool, full bool) MessageInfo {
	id, attempt, _ := store.ParseMember(r.Member)
	m := MessageInfo{Topic: topic, Group: group, Ref: store.MakeRef(partition, r.Member, r.ScoreUs), ID: id, Attempt: attempt, State: StateScheduled}
	bk, isBatch := store.BatchKeyOf(id)
	if key, ok := store.KeyOf(id); ok {
		m.Key = key
	}
	if leased {
		m.State, m.LeaseDeadline = StateInFlight, time.UnixMicro(r.ScoreUs)
	} else {
		m.DueAt = time.UnixMicro(r.ScoreUs)
	}
	if r.Size < 0 {
		m.Vanished = true
		return m
	}
	var msg *message.Message
	var err error
	whole := len(r.Data) == r.Size
	payloadSize := -1 // unknown
	switch {
	case isBatch && !whole:
		msg, err = batchPreview(id, bk, partition, r.Data)
		payloadSize = r.Size - 1
	case isBatch:
		msg, err = batchMessage(id, bk, partition, r.Data)
	case whole:
		msg, err = i.config.Unmarshaler.Unmarshal(topic, r.Data)
	case isDefaultUnmarshaler(i.config.Unmarshaler):
		var complete bool
		msg = message.NewMessage("", nil)
		msg.UUID, msg.Metadata, msg.Payload, complete, err = decodeHeader(topic, r.Data, r.Size)
		if complete {
			payloadSize = r.Size - (len(r.Data) - len(msg.Payload))
		} else {
			m.Partial, msg.Payload = true, nil
		}
	default:
		m.Partial, msg = true, message.NewMessage("", nil)
	}
	if err != nil {
		m.Vanished = true
		return m
	}
	if payloadSize < 0 {
		payloadSize = len(msg.Payload)
	}
	if m.Partial {
		payloadSize = r.Size
	}
	m.UUID, m.Metadata, m.PayloadSize = msg.UUID, msg.Metadata, payloadSize
	if m.Key != "" {
		m.Metadata[KeyMetadataKey] = m.Key
	}
	m.Preview = preview(msg.Payload)
	if full {
		m.Payload = msg.Payload
	}
	return m
}

// isDefaultUnmarshaler reports whether u is DefaultMarshalerUnmarshaler, whose header List can
// decode from the first bytes of a message.
func isDefaultUnmarshaler(u Unmarshaler) bool {
	switch u.(type) {
	case DefaultMarshalerUnmarshaler, *DefaultMarshalerUnmarshaler:
		return true
	}
	return false
}

// Message returns the message that ref (MessageInfo.Ref) names in its consumer group, with its
// whole payload; for ParkedGroup, a parked message of a topic that has no consumer group.
// Errors: an error wrapping ErrNotFound when the group no longer holds it (or the topic or
// group is unknown), or the Redis error, within OperationTimeout.
func (i *Inspector) Message(ctx context.Context, topic, group, ref string) (MessageInfo, error) {
	return i.oneByRef(ctx, topic, group, ref, false)
}

// DeadLetter returns the dead letter that ref (MessageInfo.Ref from List with StateDeadLettered) names
// among the dead letters of consumer group on topic, with its whole payload, reading that one
// message (one read-only script on the dead-letter topic's parked set). Errors: an error wrapping
// ErrNotFound when it is no longer a dead letter (requeued, or taken by a group of the
// dead-letter topic), for an unknown topic or group or a malformed ref, or the Redis error,
// within OperationTimeout.
func (i *Inspector) DeadLetter(ctx context.Context, topic, group, ref string) (MessageInfo, error) {
	return i.oneByRef(ctx, topic, group, ref, true)
}

// oneByRef reads the one message (dead: dead letter) that ref names, for Message and
// DeadLetter.
func (i *Inspector) oneByRef(ctx context.Context, topic, group, ref string, dead bool) (MessageInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	find := i.groupOrParked
	if dead {
		find = i.group
	}
	info, err := find(ctx, topic, group)
	if err != nil {
		return MessageInfo{}, err
	}
	r, ok := store.ParseRef(ref, info.Partitions)
	if !ok {
		what := "message"
		if dead {
			what = "dead letter"
		}
		return MessageInfo{}, fmt.Errorf("redisdelay: %s %s of group %s on topic %s: %w", what, quote(ref), quote(group), quote(topic), ErrNotFound)
	}
	return i.show(ctx, topic, group, r, ref, dead)
}

// MessageByKey returns the message with key in consumer group on topic, with its whole payload.
// Errors as for Message.
func (i *Inspector) MessageByKey(ctx context.Context, topic, group, key string) (MessageInfo, error) {
	st, err := i.Status(ctx, topic, key)
	if err != nil {
		return MessageInfo{}, err
	}
	if _, err := i.group(ctx, topic, group); err != nil {
		return MessageInfo{}, err
	}
	gs := st.Groups[group]
	switch gs.State {
	case StateScheduled, StateInFlight:
	case StateNotFound, "":
		return MessageInfo{}, fmt.Errorf("redisdelay: key %s in group %s on topic %s: %w", quote(key), quote(group), quote(topic), ErrNotFound)
	default:
		return MessageInfo{}, fmt.Errorf("redisdelay: key %s in group %s on topic %s (%s): %w", quote(key), quote(group), quote(topic), gs.State, ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	p := keyPartition(key, i.config.Partitions)
	id, err := i.store.KeyedMember(ctx, store.Partition{Topic: topic, N: p}.Of(group), key)
	if err != nil {
		return MessageInfo{}, err
	}
	return i.show(ctx, topic, group, store.Ref{Partition: p, Member: id}, store.MakeRef(p, id, 0), false)
}

// show reads the message r names in group, or among its dead letters when dead; name is what
// errors call it.
func (i *Inspector) show(ctx context.Context, topic, group string, r store.Ref, name string, dead bool) (MessageInfo, error) {
	g := store.Partition{Topic: topic, N: r.Partition}.Of(group)
	what, set := "message", dueSet(g)
	if dead {
		what, set = "dead letter", store.Parked(deadLetterPartition(g))
	}
	l, _, found, err := i.store.Show(ctx, set, r)
	if err != nil {
		return MessageInfo{}, fmt.Errorf("redisdelay: %s %s of group %s on topic %s: %w", what, quote(name), quote(group), quote(topic), err)
	}
	if !found {
		return MessageInfo{}, fmt.Errorf("redisdelay: %s %s of group %s on topic %s: %w", what, quote(name), quote(group), quote(topic), ErrNotFound)
	}
	m := i.describe(topic, group, r.Partition, l, l.Leased && !dead, true)
	if dead {
		deadLettered(&m)
	}
	return m, nil
}

// Requeue moves dead letters of consumer group on topic back to it, due at once: those refs
// name (MessageInfo.Ref from List with StateDeadLettered), or, with no refs, every dead letter waiting
// on its dead-letter topic (DefaultDeadLetterTopic) for a first consumer group, in chunks of
// 500 per script call. Each is stored anew for that group only, with its dead-letter metadata,
// without a key; a keyed dead letter (a message published with a key to the dead-letter topic)
// frees its key there. It returns how many were requeued; refs that no longer name a dead
// letter are skipped. Errors: an error wrapping ErrNotFound for an unknown topic or group,
// also when the group is removed while Requeue runs, or the Redis error. A chunk that fails
// leaves its dead letters where they were; those of earlier chunks stay requeued.
func (i *Inspector) Requeue(ctx context.Context, topic, group string, refs ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return 0, err
	}
	return i.requeue(ctx, info, group, refs)
}

// requeue is Requeue once group was found on the topic of info. The script checks the group
// again: it may have been removed since.
func (i *Inspector) requeue(ctx context.Context, info TopicInfo, group string, refs []string) (int64, error) {
	topic := info.Topic
	byPartition := map[int][]store.Ref{}
	for _, ref := range refs {
		r, ok := store.ParseRef(ref, info.Partitions)
		if !ok {
			return 0, fmt.Errorf("redisdelay: dead letter %s of group %s on topic %s: %w", quote(ref), quote(group), quote(topic), ErrNotFound)
		}
		byPartition[r.Partition] = append(byPartition[r.Partition], r)
	}
	var moved int64
	for p := 0; p < info.Partitions; p++ {
		g := store.Partition{Topic: topic, N: p}.Of(group)
		deadPart := deadLetterPartition(g)
		dead := store.Parked(deadPart)
		requeue := func(chunk []store.Ref) error {
			members, err := i.wholeMembers(ctx, dead, chunk)
			if err == nil && len(members) > 0 {
				var n int64
				n, err = i.store.Requeue(ctx, g, deadPart, members)
				moved += n
			}
			if err != nil {
				return fmt.Errorf("redisdelay: requeue dead letters of group %s on topic %s: %w", quote(group), quote(topic), err)
			}
			return nil
		}
		if len(refs) > 0 {
			for k := 0; k < len(byPartition[p]); k += requeueChunk {
				if err := requeue(byPartition[p][k:min(k+requeueChunk, len(byPartition[p]))]); err != nil {
					return moved, err
				}
			}
			continue
		}
		for {
			rows, _, _, err := i.store.List(ctx, dead, store.All, store.Cursor{}, requeueChunk, 0, listReadBudget)
			if err != nil {
				return moved, err
			}
			if len(rows) == 0 {
				break
			}
			chunk := make([]store.Ref, len(rows))
			for n, r := range rows {
				chunk[n] = store.RefOf(p, r.Member, r.ScoreUs)
			}
			if err := requeue(chunk); err != nil {
				return moved, err
			}
		}
	}
	return moved, nil
}

// requeueChunk is how many dead letters one requeue.lua call moves.
const requeueChunk = 500

// Purge drops the messages of consumer group on topic in one state (StateScheduled, StateDue or
// StateInFlight), for that group only, 1,000 per script call; each stored message
// goes once no other group holds it, and a batch it drops is closed, so that the next item of
// its batch key opens a new batch. It returns how many were dropped. Errors: an error wrapping
// ErrNotFound for an unknown topic or group (also when the group is removed while Purge runs),
// a bad state, or the Redis error; a purge cut short by OperationTimeout can be repeated.
func (i *Inspector) Purge(ctx context.Context, topic, group string, state State) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return 0, err
	}
	return i.purge(ctx, info, group, state)
}

// purge is Purge once group was found on the topic of info. The script checks the group
// again: it may have been removed since.
func (i *Inspector) purge(ctx context.Context, info TopicInfo, group string, state State) (int64, error) {
	topic := info.Topic
	if state == StateDeadLettered {
		return 0, fmt.Errorf("redisdelay: purge: dead letters are a topic of their own (%s): %w", quote(DefaultDeadLetterTopic(topic, group)), ErrInvalidName)
	}
	var dropped int64
	for p := 0; p < info.Partitions; p++ {
		set, span, err := listTarget(store.Partition{Topic: topic, N: p}.Of(group), state)
		if err != nil {
			return dropped, err
		}
		for {
			n, left, err := i.store.Purge(ctx, set, span, removeGroupChunk)
			dropped += n
			if err != nil {
				return dropped, fmt.Errorf("redisdelay: purge group %s on topic %s: %w", quote(group), quote(topic), err)
			}
			if left == 0 || n == 0 {
				break
			}
		}
	}
	return dropped, nil
}

// cursor is the position after the last message of a List page: in a partition, after a
// message (unless it is the zero cursor, of the first page).
type cursor struct {
	partition int
	at        store.Cursor
}

// in returns where a page starts in partition p: after c in c's partition, else at the
// beginning.
func (c cursor) in(p int) store.Cursor {
	if p != c.partition {
		return store.Cursor{}
	}
	return c.at
}

// maxCursorMember bounds the member of a cursor, which list.lua compares byte by byte: longer
// than any member a list returns (a short form, or an ID with a key and an attempt count).
const maxCursorMember = 2048

func encodeCursor(c cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(c.partition) + " " + strconv.FormatInt(c.at.ScoreUs, 10) + " " + c.at.Member))
}

func decodeCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	f := strings.SplitN(string(b), " ", 3)
	if err != nil || len(f) != 3 {
		return cursor{}, fmt.Errorf("malformed cursor %s", quote(s))
	}
	p, err1 := strconv.Atoi(f[0])
	us, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || p < 0 || len(f[2]) > maxCursorMember {
		return cursor{}, fmt.Errorf("malformed cursor %s", quote(s))
	}
	return cursor{partition: p, at: store.Cursor{ScoreUs: us, Member: f[2], After: true}}, nil
}

// wholeMembers returns the members that refs name in set (a due or parked set) of their
// partition: each ref's own member, or the one its short form finds (resolve.lua, resolveChunk
// short forms per call), leaving out short forms that find none.
func (i *Inspector) wholeMembers(ctx context.Context, set store.Set, refs []store.Ref) ([]string, error) {
	var out, shorts []string
	var scores []int64
	resolve := func() error {
		found, err := i.store.Resolve(ctx, set, shorts, scores)
		for _, m := range found {
			if m != "" {
				out = append(out, m)
			}
		}
		shorts, scores = shorts[:0], scores[:0]
		return err
	}
	for _, r := range refs {
		if !r.Short {
			out = append(out, r.Member)
			continue
		}
		shorts, scores = append(shorts, r.Member), append(scores, r.ScoreUs)
		if len(shorts) == resolveChunk {
			if err := resolve(); err != nil {
				return nil, err
			}
		}
	}
	if len(shorts) > 0 {
		if err := resolve(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// wholeMember is wholeMembers for one ref: "" when its short form finds none, which no
// script finds either.
func (i *Inspector) wholeMember(ctx context.Context, set store.Set, r store.Ref) (string, error) {
	found, err := i.wholeMembers(ctx, set, []store.Ref{r})
	if err != nil || len(found) == 0 {
		return "", err
	}
	return found[0], nil
}

// resolveChunk is how many short forms one resolve.lua call finds: each costs O(log² N) and
// copies its member, message included, inside Redis.
const resolveChunk = 64

// preview returns the first PreviewLength bytes of payload as text.
func preview(payload []byte) string {
	b := payload[:min(len(payload), PreviewLength)]
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size <= 1 || r < 0x20 || r == 0x7f {
			sb.WriteByte('.')
		} else {
			sb.WriteRune(r)
		}
		b = b[size:]
	}
	return sb.String()
}

// forEachConcurrently calls f for 0..n-1, 16 at a time, and returns the first error.
func forEachConcurrently(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- f(ctx, k)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// CancelRef cancels the message that ref (MessageInfo.Ref) names, in its consumer group only,
// with or without a key: OutcomeApplied when it was due, OutcomeInFlight when a consumer held it (its
// lease is removed, as Cancel does), OutcomeNotFound when the group no longer holds it. A batch
// still open for its batch key is closed (as by RescheduleRef and RunNowRef): later items of
// the key open a new batch, and the other groups receive this one, with the items it has, at
// its due time. A second run of the script after a lost reply returns the first run's outcome.
// Errors: an error wrapping ErrNotFound for an unknown topic, group or malformed ref, also when
// the group is removed while the call runs (checked in the same script as the write, which
// then writes nothing), or the Redis error, within OperationTimeout.
func (i *Inspector) CancelRef(ctx context.Context, topic, group, ref string) (Outcome, error) {
	o, _, err := i.refOp(ctx, topic, group, ref, store.RefCancel, store.Outgoing{})
	return o, err
}

// RescheduleRef makes the message that ref names due at dueAt (Redis clock; past means at once)
// in its consumer group only, keeping its attempt count; it returns the outcome and the new due
// time. A message in flight is left alone (OutcomeInFlight). A batch still open for its batch key
// is closed, earlier or later: later items of the key open a new batch, so none joins a batch
// whose delivery has moved. Errors as for CancelRef.
func (i *Inspector) RescheduleRef(ctx context.Context, topic, group, ref string, dueAt time.Time) (Outcome, time.Time, error) {
	return i.refOp(ctx, topic, group, ref, store.RefReschedule, store.Outgoing{At: dueAt})
}

// RunNowRef makes the message that ref names due at once in its consumer group. A batch still
// open for its batch key is closed, as by RescheduleRef. Errors as for CancelRef.
func (i *Inspector) RunNowRef(ctx context.Context, topic, group, ref string) (Outcome, time.Time, error) {
	return i.refOp(ctx, topic, group, ref, store.RefReschedule, store.Outgoing{})
}

func (i *Inspector) refOp(ctx context.Context, topic, group, ref string, op store.RefOp, when store.Outgoing) (Outcome, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return 0, time.Time{}, err
	}
	r, ok := store.ParseRef(ref, info.Partitions)
	if !ok {
		return 0, time.Time{}, fmt.Errorf("redisdelay: message %s of group %s on topic %s: %w", quote(ref), quote(group), quote(topic), ErrNotFound)
	}
	g := store.Partition{Topic: topic, N: r.Partition}.Of(group)
	member, err := i.wholeMember(ctx, store.Due(g), r)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(group), quote(topic), err)
	}
	call := store.Call{Token: store.NewToken(), TTL: i.callTTL}
	o, dueUs, err := i.store.RefOp(ctx, g, op, member, call, when)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(group), quote(topic), err)
	}
	var due time.Time
	if dueUs >= 0 {
		due = time.UnixMicro(dueUs)
	}
	outcome := outcomeOf(o)
	i.config.Metrics.acted(op == store.RefCancel, topic, map[string]Outcome{group: outcome})
	return outcome, due, nil
}

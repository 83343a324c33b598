package redisdelay

// The Inspector's operations on a whole consumer group: statistics, pause and resume,
// removal.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// GroupStats counts one consumer group's messages on a topic, summed over its partitions. Times
// are on the Redis clock.
type GroupStats struct {
	Topic, Group string
	// Scheduled are due later; Due are due now and not claimed; InFlight are leased to a
	// consumer.
	Scheduled, Due, InFlight int64
	// Compact are those of Scheduled that wait in the compact tier (see
	// PublisherConfig.CompactHorizon); they count in Scheduled too.
	Compact int64
	// DeadLetters are the group's dead letters that wait on its dead-letter topic
	// (DefaultDeadLetterTopic) for a first consumer group there: those List shows with
	// StateDeadLettered and Requeue moves back. Dead letters that a consumer group of the dead-letter
	// topic has taken are that group's messages, and a custom SubscriberConfig.DeadLetterTopic
	// is not seen here.
	DeadLetters int64
	// OldestDueAge is how long the oldest message that is due now has been due; 0 when none is.
	OldestDueAge time.Duration
	// NextDue is the earliest due time after now; zero when nothing is scheduled. For the
	// compact tier it is the start of its earliest time bucket, at or before the earliest due
	// time there.
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
	infos, err := i.statsTopics(ctx, topics)
	if err != nil {
		return nil, err
	}
	stats, jobs, parked := statsJobs(infos)
	if err := i.parkedStats(ctx, parked); err != nil {
		return nil, err
	}
	err = forEachConcurrently(ctx, len(jobs), func(ctx context.Context, n int) error {
		return i.countStats(ctx, jobs[n])
	})
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		j.addCounts()
	}
	out := make([]GroupStats, len(stats))
	for n, st := range stats {
		out[n] = *st
	}
	return out, nil
}

// statsTopics returns the registry entries of topics, or of every topic in the registry when
// there are none.
func (i *Inspector) statsTopics(ctx context.Context, topics []string) ([]TopicInfo, error) {
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
	return infos, nil
}

// statsJob is one script call of Stats: one topic partition, for all the topic's groups.
type statsJob struct {
	stats     []*GroupStats
	partition int
	counts    []store.GroupCounts
}

// statsJobs returns the statistics of every group of infos, zero, in order, and the jobs that
// count them: one per topic partition, or for a topic with no group, one parkedJob per
// partition, unless the topic is the dead-letter topic of one of the groups.
func statsJobs(infos []TopicInfo) ([]*GroupStats, []*statsJob, []parkedJob) {
	var stats []*GroupStats
	var jobs []*statsJob
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
				jobs = append(jobs, &statsJob{stats: group, partition: n})
			}
		}
	}
	return stats, jobs, parked
}

// countStats runs the stats script of j and keeps its counts in j.
func (i *Inspector) countStats(ctx context.Context, j *statsJob) error {
	topic := j.stats[0].Topic
	groups, dead := make([]string, len(j.stats)), make([]store.Partition, len(j.stats))
	for k, st := range j.stats {
		groups[k] = st.Group
		dead[k] = store.Partition{Topic: DefaultDeadLetterTopic(topic, st.Group), N: j.partition}
	}
	var err error
	j.counts, err = i.store.Stats(ctx, store.Partition{Topic: topic, N: j.partition}, groups, dead)
	if err != nil {
		return fmt.Errorf("redisdelay: stats of topic %s: %w", quote(topic), err)
	}
	return nil
}

// addCounts adds the counts of one partition to its groups' statistics.
func (j *statsJob) addCounts() {
	for k, c := range j.counts {
		st := j.stats[k]
		st.Scheduled += c.Scheduled
		st.Compact += c.Compact
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
// (logged; their channel closes), and their acks are refused.
//
// RemoveGroup does not wait for other processes: a delivery under way may still reach the
// handler after it returns, until the subscription has had the removal's wake-up (a Pub/Sub
// hop; LeaseTimeout/3 when the wake-up is lost), a few µs to ms later, and a handler already
// running goes on. Such a message is no longer the group's: its Ack is refused and logged at
// info level, its Nack is refused (it is not retried in the group), and other groups that hold
// it keep it. Close the group's Subscribers first when no handler may run after the removal.
//
// A Subscribe of the group during or after the removal registers it again, empty: it receives
// what is published after its Subscribe returned, and the removal's later steps leave it alone;
// the running subscriptions of the removed registration stay stopped. (When Redis loses its
// data instead, subscriptions register their group again; see docs/guarantees.md.) Its
// dead-letter topic is a topic of its own and stays. It returns how many messages were dropped. Errors: an error
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

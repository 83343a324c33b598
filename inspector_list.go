package redisdelay

// The Inspector's reading of messages: a page of a group's messages (List; paging.go holds
// its options and cursor), one message by ref (Message, DeadLetter), and the previews they
// show.

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

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

// List returns one page of the messages of consumer group on topic in the given state, in
// due-time (or lease-deadline) order, partition by partition, each with a preview: UUID,
// metadata, payload size and Preview decoded from the first ListReadBytes of the stored
// message (see MessageInfo.Partial), never the whole message. A cursor holds the last
// message's position, its due time and member: the next page starts after it in O(log² N)
// (ZCOUNT, ZRANK, a binary search among members of equal due time), never by skipping an
// offset, so a page costs the same with 1M messages of one due time, whatever the cursor says.
// Messages added or removed between pages do not shift the others; a message whose due time
// changes between pages may be missed or seen twice. A page may hold fewer than Limit messages
// and still have a NextCursor, when its messages are large (see ListReadBytes). With
// StateScheduled, the messages of the group's compact tier (see PublisherConfig.CompactHorizon)
// follow those of its due set, in each partition: its time buckets in the order they move into
// the due set, and within a bucket the messages in the order they were stored, not by due
// time; a cursor there holds the bucket and a position in it. A page that resumes in a bucket
// that has moved into the due set meanwhile starts at the next bucket, and one whose bucket has
// moved in part may skip messages; a message that moved is not listed again, since it now
// waits in the due set, before the cursor. For
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
	limit := listLimit(opts.Limit)
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
			rows, next, cut, err := i.store.List(ctx, set, span, after, want, ListReadBytes, listReadBudget)
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
			after = next
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

// dueSet is the set that holds the messages of group g that are not in flight: its due set, or
// for ParkedGroup the partition's parked set.
func dueSet(g store.Group) store.Set {
	if g.Name == ParkedGroup {
		return store.Parked(g.Partition)
	}
	return store.Due(g)
}

// describe turns a listed member into a MessageInfo, decoding the stored message from r.data:
// its first bytes (List) or all of it (Message, full).
func (i *Inspector) describe(topic, group string, partition int, r store.Listed, leased bool, full bool) MessageInfo {
	id, attempt, _ := store.ParseMember(r.Member)
	ref := store.MakeRef(partition, r.Member, r.ScoreUs)
	if r.Far {
		ref = store.MakeTierRef(partition, r.Member, r.ScoreUs)
	}
	m := MessageInfo{Topic: topic, Group: group, Ref: ref, ID: id, Attempt: attempt, State: StateScheduled}
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
	msg, payloadSize, partial, err := i.decodeListed(topic, id, partition, r)
	m.Partial = partial
	if err != nil {
		m.Vanished = true
		return m
	}
	m.UUID, m.Metadata, m.PayloadSize = msg.UUID, msg.Metadata, payloadSize
	if m.Key != "" {
		setKeyMetadata(m.Metadata, m.Key)
	}
	m.Preview = preview(msg.Payload)
	if full {
		m.Payload = msg.Payload
	}
	return m
}

// decodeListed decodes the stored message with id from r.data, which holds all of it or its
// first bytes, and returns its payload size. It is partial when r.data held too little for
// the UUID and metadata, or for a custom Unmarshaler: then the message holds what fitted (with
// a custom Unmarshaler, nothing), no payload, and the size is the stored message's.
func (i *Inspector) decodeListed(topic, id string, partition int, r store.Listed) (msg *message.Message, payloadSize int, partial bool, err error) {
	bk, isBatch := store.BatchKeyOf(id)
	whole := len(r.Data) == r.Size
	payloadSize = -1 // unknown
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
			partial, msg.Payload = true, nil
		}
	default:
		partial, msg = true, message.NewMessage("", nil)
	}
	if err != nil {
		return msg, payloadSize, partial, err
	}
	if payloadSize < 0 {
		payloadSize = len(msg.Payload)
	}
	if partial {
		payloadSize = r.Size
	}
	return msg, payloadSize, partial, nil
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

// Message returns the message that t names on topic, with its whole payload, reading that one
// message:
//   - ByRef: the message the ref names in its consumer group; for ParkedGroup, a parked message
//     of a topic that has no consumer group. A message List showed in the compact tier is
//     found there by its due time, which its ref holds, among the first 10,000 entries of the
//     buckets that could hold it (more only with a bucket of more messages than that: a
//     message beyond them is found once its bucket has moved into the due set).
//   - ByDeadLetter: the dead letter the ref names among the group's dead letters (one
//     read-only script on the dead-letter topic's parked set); not found once it is no longer
//     a dead letter (requeued, or taken by a group of the dead-letter topic).
//   - ByKey(key).InGroup(group): the message with the key in the group, while the group holds
//     it (scheduled or in flight).
//
// Errors: an error wrapping ErrNotFound when the group no longer holds it, for an unknown
// topic or group or a malformed ref, ErrUnsupportedTarget for another target, or the Redis
// error, within OperationTimeout.
func (i *Inspector) Message(ctx context.Context, topic string, t Target) (MessageInfo, error) {
	switch t.kind {
	case targetRef, targetDeadLetter:
		return i.oneByRef(ctx, topic, t)
	case targetGroupKey:
		return i.messageByKey(ctx, topic, t.group, t.name)
	}
	return MessageInfo{}, unsupported("read", topic, t)
}

// oneByRef reads the one message or dead letter that t names, for Message.
func (i *Inspector) oneByRef(ctx context.Context, topic string, t Target) (MessageInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	dead := t.kind == targetDeadLetter
	find := i.groupOrParked
	if dead {
		find = i.group
	}
	info, err := find(ctx, topic, t.group)
	if err != nil {
		return MessageInfo{}, err
	}
	r, ok := store.ParseRef(t.name, info.Partitions)
	if !ok {
		return MessageInfo{}, fmt.Errorf("redisdelay: %s on topic %s: %w", t.describe(), quote(topic), ErrNotFound)
	}
	return i.show(ctx, topic, t.group, r, t.name, dead)
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

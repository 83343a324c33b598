package redisdelay

// This file owns the marshaling of a message into the bytes stored in Redis, and the default
// binary format.

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// Marshaler turns a message into the bytes stored in Redis. The stored bytes are opaque to the
// Lua scripts. Marshal must not modify msg.
type Marshaler interface {
	Marshal(topic string, msg *message.Message) ([]byte, error)
}

// Unmarshaler turns stored bytes back into a message. The returned message must carry the UUID,
// metadata and payload that were marshaled, and a non-nil Metadata map.
type Unmarshaler interface {
	Unmarshal(topic string, data []byte) (*message.Message, error)
}

// MarshalerUnmarshaler is both a Marshaler and an Unmarshaler.
type MarshalerUnmarshaler interface {
	Marshaler
	Unmarshaler
}

// DefaultMarshalerUnmarshaler stores a message in a compact binary form that round-trips the
// UUID, every metadata key and value, and the payload byte for byte:
//
//	byte     format: 1 = UUID as length-prefixed text, 2 = canonical UUID as 16 raw bytes
//	...      UUID
//	uvarint  number of metadata entries, then per entry, in key order:
//	         key:   uvarint 16+length, then the key; or a uvarint below 16 that names one of
//	                the well-known keys (Watermill's delay keys, the dead-letter keys)
//	         value: uvarint 1+length, then the value; or 0, then a uvarint of Unix seconds,
//	                for a time that time.RFC3339 formats in UTC exactly as stored
//	...      payload (the rest)
//
// Lengths are unsigned varints (encoding/binary). A canonical UUID is the lower-case 36-character
// form that uuid.UUID.String produces; other UUID strings, "1" included, are stored as text. The
// short forms keep a delayed message's stored metadata at about a dozen bytes.
type DefaultMarshalerUnmarshaler struct{}

// wellKnownKeys are the metadata keys stored as one byte. The order is part of the stored format:
// append only.
var wellKnownKeys = []string{
	delay.DelayedUntilKey, delay.DelayedForKey,
	DeadLetterTopicMetadataKey, DeadLetterGroupMetadataKey, DeadLetterAttemptsMetadataKey, DeadLetterReasonMetadataKey,
}

const (
	reservedKeyTags = 16 // key tags below this name well-known keys
	compactTimeTag  = 0  // value tag of a compact RFC3339 time
)

var wellKnownKeyTags = func() map[string]uint64 {
	tags := make(map[string]uint64, len(wellKnownKeys))
	for i, k := range wellKnownKeys {
		tags[k] = uint64(i)
	}
	return tags
}()

const (
	formatTextUUID   byte = 1
	formatBinaryUUID byte = 2
)

// Marshal encodes msg. It never fails; the error is part of the Marshaler interface.
func (DefaultMarshalerUnmarshaler) Marshal(_ string, msg *message.Message) ([]byte, error) {
	keys := make([]string, 0, len(msg.Metadata))
	size := 1 + binary.MaxVarintLen64*(2+2*len(msg.Metadata)) + len(msg.UUID) + len(msg.Payload)
	for k, v := range msg.Metadata {
		keys = append(keys, k)
		size += len(k) + len(v)
	}
	slices.Sort(keys)

	buf := make([]byte, 0, size)
	if id, ok := canonicalUUID(msg.UUID); ok {
		buf = append(buf, formatBinaryUUID)
		buf = append(buf, id[:]...)
	} else {
		buf = append(buf, formatTextUUID)
		buf = appendString(buf, msg.UUID)
	}
	buf = binary.AppendUvarint(buf, uint64(len(keys)))
	for _, k := range keys {
		if tag, ok := wellKnownKeyTags[k]; ok {
			buf = binary.AppendUvarint(buf, tag)
		} else {
			buf = binary.AppendUvarint(buf, reservedKeyTags+uint64(len(k)))
			buf = append(buf, k...)
		}
		v := msg.Metadata[k]
		if unix, ok := compactTime(v); ok {
			buf = binary.AppendUvarint(buf, compactTimeTag)
			buf = binary.AppendUvarint(buf, uint64(unix))
		} else {
			buf = binary.AppendUvarint(buf, 1+uint64(len(v)))
			buf = append(buf, v...)
		}
	}
	return append(buf, msg.Payload...), nil
}

// compactTime returns the Unix seconds of metadata value v when Marshal stores it in compact
// form: whole seconds from 1970 on, in UTC, as time.RFC3339 writes them, which is 20 bytes and
// ends in "Z" (up to year 9999); ok is false for any other value. The length and last byte are
// checked first: a failed time.Parse allocates its error, which every other value (a delay, an
// ID) paid on every publish.
func compactTime(v string) (unix int64, ok bool) {
	if len(v) != len("2006-01-02T15:04:05Z") || v[len(v)-1] != 'Z' {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Unix() < 0 || time.Unix(t.Unix(), 0).UTC().Format(time.RFC3339) != v {
		return 0, false
	}
	return t.Unix(), true
}

// Unmarshal decodes data written by Marshal. It returns an error wrapping ErrCorruptMessage when
// data is truncated or of an unknown format.
func (DefaultMarshalerUnmarshaler) Unmarshal(topic string, data []byte) (*message.Message, error) {
	msgUUID, metadata, payload, _, err := decodeHeader(topic, data, len(data))
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(msgUUID, slices.Clone(payload))
	msg.Metadata = metadata
	return msg, nil
}

// decodeHeader decodes the UUID and metadata of data, the first bytes of a message of size
// bytes stored by DefaultMarshalerUnmarshaler (size is len(data) for a whole message), and
// returns the payload bytes that follow them in data. When data ends within the UUID or the
// metadata, before size, it returns what it could decode, the UUID and every whole entry, with
// complete false. Errors wrap ErrCorruptMessage: a whole message that is truncated, or an
// unknown format.
func decodeHeader(topic string, data []byte, size int) (msgUUID string, metadata message.Metadata, payload []byte, complete bool, err error) {
	d := decoder{data: data}
	switch format := d.byte(); format {
	case formatBinaryUUID:
		if b := d.bytes(16); d.err == nil {
			var id uuid.UUID
			copy(id[:], b)
			msgUUID = id.String()
		}
	case formatTextUUID:
		msgUUID = d.string()
	default:
		if d.err == nil {
			return "", nil, nil, false, fmt.Errorf("redisdelay: topic %q: %w: unknown format byte %d", topic, ErrCorruptMessage, format)
		}
	}
	n := d.uvarint()
	if n > uint64(size) { // each entry takes at least two bytes
		return "", nil, nil, false, fmt.Errorf("redisdelay: topic %q: %w: %d metadata entries in %d bytes", topic, ErrCorruptMessage, n, size)
	}
	metadata = make(message.Metadata, min(n, uint64(len(data))))
	for i := uint64(0); i < n && d.err == nil; i++ {
		var k, v string
		switch tag := d.uvarint(); {
		case tag >= reservedKeyTags:
			k = string(d.bytes(tag - reservedKeyTags))
		case tag < uint64(len(wellKnownKeys)):
			k = wellKnownKeys[tag]
		default:
			d.fail(fmt.Sprintf("unknown key tag %d", tag))
		}
		switch tag := d.uvarint(); tag {
		case compactTimeTag:
			v = time.Unix(int64(d.uvarint()), 0).UTC().Format(time.RFC3339)
		default:
			v = string(d.bytes(tag - 1))
		}
		if d.err == nil {
			metadata[k] = v
		}
	}
	switch {
	case d.err == nil:
		return msgUUID, metadata, d.data, true, nil
	case len(data) < size:
		return msgUUID, metadata, nil, false, nil
	}
	return "", nil, nil, false, fmt.Errorf("redisdelay: topic %q: %w: %v", topic, ErrCorruptMessage, d.err)
}

func canonicalUUID(s string) (uuid.UUID, bool) {
	if len(s) != 36 {
		return uuid.UUID{}, false
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.UUID{}, false
	}
	// The canonical form, compared without allocating a string for it.
	var canon [36]byte
	hex.Encode(canon[:8], id[:4])
	canon[8] = '-'
	hex.Encode(canon[9:13], id[4:6])
	canon[13] = '-'
	hex.Encode(canon[14:18], id[6:8])
	canon[18] = '-'
	hex.Encode(canon[19:23], id[8:10])
	canon[23] = '-'
	hex.Encode(canon[24:], id[10:])
	return id, string(canon[:]) == s
}

// appendString appends a uvarint length and s.
func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// decoder reads the default format; the first error sticks and later reads return zero values.
type decoder struct {
	data []byte
	err  error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated %s", what)
	}
	d.data = nil
}

func (d *decoder) byte() byte {
	if len(d.data) < 1 {
		d.fail("format byte")
		return 0
	}
	b := d.data[0]
	d.data = d.data[1:]
	return b
}

func (d *decoder) bytes(n uint64) []byte {
	if uint64(len(d.data)) < n {
		d.fail("field")
		return nil
	}
	b := d.data[:n]
	d.data = d.data[n:]
	return b
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.data)
	if n <= 0 {
		d.fail("length")
		return 0
	}
	d.data = d.data[n:]
	return v
}

func (d *decoder) string() string {
	return string(d.bytes(d.uvarint()))
}

package redisdelay_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestMarshalerRoundTripsEveryByte(t *testing.T) {
	m := redisdelay.DefaultMarshalerUnmarshaler{}
	cases := []*message.Message{
		message.NewMessage("1", nil),
		message.NewMessage("0b3c8b28-4e5a-4b7e-9f4c-2d1e6f7a8b9c", []byte("order 42")),
		message.NewMessage("0B3C8B28-4E5A-4B7E-9F4C-2D1E6F7A8B9C", []byte{0, 1, 2, 255}), // not canonical: kept as text
		message.NewMessage("", []byte("")),
	}
	withMeta := message.NewMessage("x", []byte("p"))
	withMeta.Metadata.Set("", "empty key")
	withMeta.Metadata.Set("binary\x00key", "\xff\xfe value")
	withMeta.Metadata.Set("_watermill_delayed_for", "1.5s")
	cases = append(cases, withMeta)
	for _, until := range []string{"2026-11-21T12:00:00Z", "2026-11-21T13:00:00+01:00", "2026-11-21T12:00:00.5Z", "1969-12-31T23:59:59Z", "not a time"} {
		m := message.NewMessage("u", nil)
		m.Metadata.Set("_watermill_delayed_until", until)
		m.Metadata.Set("created_at", until)
		cases = append(cases, m)
	}

	for _, msg := range cases {
		data, err := m.Marshal("t", msg)
		require.NoError(t, err)
		got, err := m.Unmarshal("t", data)
		require.NoError(t, err)
		assert.Equal(t, msg.UUID, got.UUID)
		assert.True(t, bytes.Equal(msg.Payload, got.Payload), "payload of %q", msg.UUID)
		assert.Equal(t, len(msg.Metadata), len(got.Metadata))
		for k, v := range msg.Metadata {
			assert.Equal(t, v, got.Metadata[k], "metadata %q", k)
		}
		assert.NotNil(t, got.Metadata)
	}
}

func TestMarshalerStoresCanonicalUUIDsCompactly(t *testing.T) {
	m := redisdelay.DefaultMarshalerUnmarshaler{}
	data, err := m.Marshal("t", message.NewMessage("0b3c8b28-4e5a-4b7e-9f4c-2d1e6f7a8b9c", nil))
	require.NoError(t, err)
	assert.Len(t, data, 1+16+1, "format byte, 16 UUID bytes, empty metadata count")
}

func TestMarshalerStoresDelayMetadataInAFewBytes(t *testing.T) {
	msg := message.NewMessage("0b3c8b28-4e5a-4b7e-9f4c-2d1e6f7a8b9c", make([]byte, 100))
	delay.Message(msg, delay.For(30*time.Minute))
	data, err := redisdelay.DefaultMarshalerUnmarshaler{}.Marshal("t", msg)
	require.NoError(t, err)
	overhead := len(data) - len(msg.Payload)
	assert.LessOrEqual(t, overhead, 1+16+1+7+8, "format, UUID, count, until, for: %d bytes", overhead)
	got, err := redisdelay.DefaultMarshalerUnmarshaler{}.Unmarshal("t", data)
	require.NoError(t, err)
	assert.Equal(t, msg.Metadata, got.Metadata)
}

func TestUnmarshalRejectsCorruptData(t *testing.T) {
	m := redisdelay.DefaultMarshalerUnmarshaler{}
	good, err := m.Marshal("t", message.NewMessage("abc", []byte("payload")))
	require.NoError(t, err)
	for _, data := range [][]byte{nil, {9}, {1}, {1, 200}, {2, 1, 2}, good[:3], {1, 0, 5, 1, 'k'}} {
		_, err := m.Unmarshal("orders", data)
		assert.ErrorIs(t, err, redisdelay.ErrCorruptMessage, "%v", data)
		if err != nil {
			assert.Contains(t, err.Error(), `"orders"`)
		}
	}
}

func FuzzMarshalerRoundTrip(f *testing.F) {
	f.Add("1", []byte("payload"), "key", "value")
	f.Add("0b3c8b28-4e5a-4b7e-9f4c-2d1e6f7a8b9c", []byte{}, "", "")
	f.Add("", []byte{0, 255}, "_watermill_delayed_until", "2026-11-21T12:00:00Z")
	f.Fuzz(func(t *testing.T, uuid string, payload []byte, key, value string) {
		m := redisdelay.DefaultMarshalerUnmarshaler{}
		msg := message.NewMessage(uuid, payload)
		msg.Metadata.Set(key, value)
		msg.Metadata.Set(key+"2", value+value)
		data, err := m.Marshal("t", msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Unmarshal("t", data)
		if err != nil {
			t.Fatal(err)
		}
		if got.UUID != uuid || !bytes.Equal(got.Payload, payload) || len(got.Metadata) != len(msg.Metadata) {
			t.Fatalf("round trip changed the message: %q %q %v", got.UUID, got.Payload, got.Metadata)
		}
		for k, v := range msg.Metadata {
			if got.Metadata[k] != v {
				t.Fatalf("metadata %q: got %q want %q", k, got.Metadata[k], v)
			}
		}
		// Arbitrary bytes must never panic the decoder.
		_, _ = m.Unmarshal("t", payload)
	})
}

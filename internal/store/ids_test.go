package store

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEveryMemberFormSplitsIntoItsIDAndAttempt(t *testing.T) {
	for _, tc := range []struct {
		member, id string
		attempt    int
		ok         bool
	}{
		{member: "00000000002a", id: "00000000002a", ok: true},
		{member: "00000000002a|marshaled message", id: "00000000002a", ok: true},
		{member: "00000000002a|", id: "00000000002a", ok: true},
		{member: "00000000002a:3", id: "00000000002a", attempt: 3, ok: true},
		{member: "00000000002a=order:42:0", id: "00000000002a=order:42", ok: true},
		{member: "00000000002a=\x01zone\x0100000000002b:2", id: "00000000002a=\x01zone\x0100000000002b", attempt: 2, ok: true},
		{member: "short", id: "short"},
		{member: "00000000002a=key-without-attempt", id: "00000000002a=key-without-attempt"},
	} {
		id, attempt, ok := ParseMember(tc.member)
		assert.Equal(t, tc.ok, ok, "%q", tc.member)
		if ok {
			assert.Equal(t, tc.id, id, "%q", tc.member)
			assert.Equal(t, tc.attempt, attempt, "%q", tc.member)
			if strings.HasSuffix(tc.member, ":"+strconv.Itoa(attempt)) {
				assert.Equal(t, tc.member, Member(id, int64(attempt)), "ID:N built again")
			}
		}
		assert.Equal(t, tc.id, memberID(tc.member), "as split.lua reads %q", tc.member)
	}
}

func TestAnIDNamesItsKeyOrItsBatchKeyNeverBoth(t *testing.T) {
	for _, tc := range []struct {
		id, key, batchKey string
	}{
		{id: "00000000002a"},
		{id: "00000000002a=order:42", key: "order:42"},
		{id: "00000000002a=\x01zone\x0100000000002b", batchKey: "zone"},
	} {
		key, ok := KeyOf(tc.id)
		assert.Equal(t, tc.key, key, "%q", tc.id)
		assert.Equal(t, tc.key != "", ok, "%q", tc.id)
		bk, ok := BatchKeyOf(tc.id)
		assert.Equal(t, tc.batchKey, bk, "%q", tc.id)
		assert.Equal(t, tc.batchKey != "", ok, "%q", tc.id)
		assert.Equal(t, "00000000002a", Seq(tc.id))
	}
	history, ok := historyKeyOf("00000000002a=\x01zone\x0100000000002b:1")
	assert.True(t, ok)
	assert.Equal(t, "\x01zone\x0100000000002b", history, "a batch's history is under its whole key part")
	_, ok = historyKeyOf("00000000002a:1")
	assert.False(t, ok)
}

func TestAKeyedMessageThatNoGroupClaimedIsAtAttemptZero(t *testing.T) {
	m, ok := keyedMember("order:42", "00000000002a"+"marshaled message")
	assert.True(t, ok)
	assert.Equal(t, "00000000002a=order:42:0", m)
	_, ok = keyedMember("order:42", "")
	assert.False(t, ok, "no value: no message has the key")
}

func TestARefNamesItsMemberAndNeverCarriesTheMessage(t *testing.T) {
	for _, tc := range []struct {
		p       int
		member  string
		scoreUs int64
		want    Ref
	}{
		{p: 0, member: "00000000002a:1", want: Ref{Member: "00000000002a:1"}},
		{p: 3, member: "00000000002a=a/b c:0", want: Ref{Partition: 3, Member: "00000000002a=a/b c:0"}},
		{p: 1, member: "00000000002a|" + strings.Repeat("x", 1000), scoreUs: 1700000000000000, want: Ref{Partition: 1, Member: "00000000002a|", Short: true, ScoreUs: 1700000000000000}},
	} {
		ref := MakeRef(tc.p, tc.member, tc.scoreUs)
		assert.Less(t, len(ref), 100, "%q", tc.member)
		got, ok := ParseRef(ref, 4)
		assert.True(t, ok, ref)
		assert.Equal(t, tc.want, got, ref)
		if tc.want.Short {
			assert.Equal(t, tc.want, RefOf(tc.p, tc.want.Member, tc.scoreUs), "a listed short form")
		}
	}
}

func TestARefThatNamesNoMessageIsRefused(t *testing.T) {
	marker := "~lease-set-marker~" + strings.Repeat("~", 62)
	for _, ref := range []string{
		"",
		"0",
		"x/MDAwMDAwMDAwMDJhOjE",   // not a partition
		"4/MDAwMDAwMDAwMDJhOjE",   // partition out of range
		"-1/MDAwMDAwMDAwMDJhOjE",  // negative partition
		"0/!!!",                   // not base64url
		"0/MDAwMDAwMDAwMDJhOjE.x", // a short form needs a score
		MakeRef(0, marker, 0),
		MakeRef(0, "00000000002A:1", 0), // not lowercase hex
		MakeRef(0, "00000000002a:x", 0), // no attempt count
	} {
		_, ok := ParseRef(ref, 4)
		assert.False(t, ok, "%q", ref)
	}
}

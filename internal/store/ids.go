package store

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// ids.go owns the Go side of the one format that names a message: its internal ID (hex
// digits, then "=" and a key for a keyed message, a batch's key between batchMark bytes), its
// member in a sorted set (ID, ID|message, ID:N, and the short form "ID|"), as the data model at
// the top of scripts.go describes them and lua/lib/split.lua reads them, and the ref an
// operator copies. Every other file calls these; none splits a member itself.

// seqDigits is how many hex digits start every internal ID.
const seqDigits = 12

// batchMark starts and ends the batch key in the key of a batch's ID. Message keys cannot hold
// control characters, so a batch's ID never looks like a keyed message's.
const batchMark = "\x01"

// Seq returns the hex digits that start an internal ID, which number the message on its topic
// partition.
func Seq(id string) string { return id[:seqDigits] }

// keyPart returns what follows "=" in an internal ID: the key of a keyed message, or the key
// part of a batch's ID.
func keyPart(id string) (string, bool) {
	if len(id) > seqDigits+1 && id[seqDigits] == '=' {
		return id[seqDigits+1:], true
	}
	return "", false
}

// KeyOf returns the message key of a keyed message's internal ID; false for an ID without a
// key and for a batch's ID.
func KeyOf(id string) (string, bool) {
	key, ok := keyPart(id)
	if !ok || strings.HasPrefix(key, batchMark) {
		return "", false
	}
	return key, true
}

// BatchKeyOf returns the batch key of a batch's internal ID; false for any other ID.
func BatchKeyOf(id string) (string, bool) {
	key, ok := keyPart(id)
	if !ok || !strings.HasPrefix(key, batchMark) {
		return "", false
	}
	bk, _, ok := strings.Cut(key[len(batchMark):], batchMark)
	return bk, ok
}

// Member returns the member "ID:N" of a message at attempt N: in the lease set, the lease's
// fencing token.
func Member(id string, attempt int64) string { return id + ":" + strconv.FormatInt(attempt, 10) }

// keyedField returns the messages hash field of the keyed message with key: "=" and the key.
// Its value starts with the message ID's hex digits (see keyedMember).
func keyedField(key string) string { return "=" + key }

// keyedMember returns the member of a keyed message that no group has claimed yet, ID:0, from
// its key and the value of its messages hash field, which starts with the ID's hex digits. It
// returns false for a value too short to hold them.
func keyedMember(key, value string) (string, bool) {
	if len(value) < seqDigits {
		return "", false
	}
	return Member(value[:seqDigits]+"="+key, 0), true
}

// ParseMember splits a member, or a short form "ID|", into its internal ID and attempt count;
// ok is false when it is malformed.
func ParseMember(m string) (id string, attempt int, ok bool) {
	if len(m) < seqDigits {
		return m, 0, false
	}
	switch {
	case len(m) == seqDigits:
		return m, 0, true
	case m[seqDigits] == '|':
		return m[:seqDigits], 0, true
	}
	j := strings.LastIndexByte(m, ':')
	if j < seqDigits {
		return m, 0, false
	}
	n, err := strconv.Atoi(m[j+1:])
	return m[:j], n, err == nil
}

// memberID returns the ID of a member as lua/lib/split.lua reads it: the whole name when it is
// malformed, so that a script and its caller agree on the key of any member.
func memberID(m string) string {
	id, _, ok := ParseMember(m)
	if !ok {
		return m
	}
	return id
}

// historyKeyOf returns what names the history of the message of member m: the key part of its
// ID (a message key, or a batch's), and false when its ID has none.
func historyKeyOf(m string) (string, bool) { return keyPart(memberID(m)) }

// shortForm returns the short form "ID|" of a member that holds its message, and false for any
// other member.
func shortForm(m string) (string, bool) {
	if len(m) > seqDigits && m[seqDigits] == '|' {
		return m[:seqDigits+1], true
	}
	return "", false
}

// isShort reports whether m is a short form "ID|" itself, as a list names a member that holds
// its message.
func isShort(m string) bool { return len(m) == seqDigits+1 && m[seqDigits] == '|' }

// isHex reports whether s is lowercase hex digits only.
func isHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

// Ref names one message in its consumer group: its partition and member, or the member's short
// form and score (see MakeRef).
type Ref struct {
	Partition int
	// Member is the member, or its short form "ID|" when Short; ScoreUs is then its score.
	Member  string
	Short   bool
	ScoreUs int64
	// Dated is set for a whole member with its due time, ScoreUs, as a ref of a message in a
	// group's compact tier names it (see MakeTierRef): Show looks for it there too.
	Dated bool
}

// RefOf returns the Ref of a member of partition p scored scoreUs, as a list returned it: a
// short form names the member that holds its message.
func RefOf(p int, member string, scoreUs int64) Ref {
	return Ref{Partition: p, Member: member, Short: isShort(member), ScoreUs: scoreUs}
}

// MakeRef names a member of partition p scored scoreUs as text safe for URLs, JSON and command
// lines: the partition, "/", and the member in unpadded base64url (a member may be binary). A
// member that holds its message (ID|message) is named by its short form "ID|", then "." and
// its score, so that a ref never carries the message; such a ref stops naming the message when
// its due time changes.
func MakeRef(p int, member string, scoreUs int64) string {
	ref := strconv.Itoa(p) + "/"
	if short, ok := shortForm(member); ok {
		return ref + base64.RawURLEncoding.EncodeToString([]byte(short)) + "." + strconv.FormatInt(scoreUs, 10)
	}
	return ref + base64.RawURLEncoding.EncodeToString([]byte(member))
}

// MakeTierRef names a member of partition p due at dueUs in its group's compact tier, as
// MakeRef does, but a whole member too with "." and its due time, the position Show finds it
// by in the tier.
func MakeTierRef(p int, member string, dueUs int64) string {
	if _, ok := shortForm(member); ok {
		return MakeRef(p, member, dueUs)
	}
	return MakeRef(p, member, 0) + "." + strconv.FormatInt(dueUs, 10)
}

// ParseRef reads a ref of MakeRef or MakeTierRef, checking its partition against partitions. Only a message's
// member is a ref: never the lease set's marker, nor anything else that is not hex digits and
// a well-formed rest.
func ParseRef(ref string, partitions int) (Ref, bool) {
	partition, encoded, ok := strings.Cut(ref, "/")
	p, err := strconv.Atoi(partition)
	if !ok || err != nil || p < 0 || p >= partitions {
		return Ref{}, false
	}
	if encoded, score, short := strings.Cut(encoded, "."); short {
		us, err := strconv.ParseInt(score, 10, 64)
		member, err2 := base64.RawURLEncoding.DecodeString(encoded)
		if err != nil || err2 != nil {
			return Ref{}, false
		}
		if isShort(string(member)) {
			return Ref{Partition: p, Member: string(member), Short: true, ScoreUs: us}, true
		}
		if !isMember(member) {
			return Ref{}, false
		}
		return Ref{Partition: p, Member: string(member), Dated: true, ScoreUs: us}, true
	}
	member, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil {
		return Ref{}, false
	}
	if !isMember(member) {
		return Ref{}, false
	}
	return Ref{Partition: p, Member: string(member)}, true
}

// isMember reports whether m is a message's member whose ID starts with hex digits.
func isMember(m []byte) bool {
	_, _, ok := ParseMember(string(m))
	return ok && isHex(string(m[:seqDigits]))
}

package store

import (
	"encoding/base64"
	"encoding/binary"
	"math/rand/v2"
	"time"
)

// publish.go owns storing messages: publish.lua for a batch, with WAIT when the owner asks for
// replicas, and how a message's schedule and key travel to the script.

// Outgoing is a message ready to be stored: its marshaled form and when it is due, either Delay
// after the Redis clock at publish time, but no later than Latest when Latest is set, or, when
// At is set, at that instant.
type Outgoing struct {
	Data   []byte
	Delay  time.Duration
	At     time.Time
	Latest time.Time
	// KeySpec is "" for a message without a key, else what KeySpec or BatchSpec returns.
	KeySpec string
}

// Call names one run of a script that must not act twice: its token, and how long Redis keeps
// the token after the first run (ms precision), within which a second run acts no more.
type Call struct {
	Token string
	TTL   time.Duration
}

// NewToken returns a random token of 16 characters that names one publish or claim call, so
// that a second run of the call is recognised.
func NewToken() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

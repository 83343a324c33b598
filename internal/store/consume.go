package store

// consume.go owns what a consumer does with its group's messages: register the group, claim,
// ack, nack, extend, release, dead-letter, and drop what a closed new-group window left.

// Lease names a message a subscription holds: its ID and the attempt it was claimed for, which
// together are the lease's fencing token (see Member).
type Lease struct {
	ID      string
	Attempt int64
}

// member is the lease's member in the lease set, its fencing token.
func (l Lease) member() string { return Member(l.ID, l.Attempt) }

// Claimed is one message a claim leased.
type Claimed struct {
	Lease
	DueUs int64  // due time, Unix µs on the Redis clock
	Data  []byte // the stored message
}

// Held is a lease a stopping subscription gives back (see Store.Release).
type Held struct {
	Lease
	DueUs int64 // due time, Unix µs on the Redis clock, which it gets back
	// Delivered is set once the message was handed to the application: its attempt counts.
	Delivered bool
}

// ClaimCall names one claim: the subscription, whose claim record holds its last claim, and
// the claim's token, so that a claim whose reply was lost is answered again.
type ClaimCall struct {
	Subscription, Token string
}

// ClaimResult is what one claim call returns.
type ClaimResult struct {
	NowUs       int64    // Redis clock when the script ran, Unix µs
	NextDueUs   int64    // earliest due time left in the group, -1 if none
	NextLeaseUs int64    // earliest lease deadline in the group, -1 if none
	RefusedAcks []string // IDs whose ack was refused: the lease had been lost
	Dropped     int64    // due entries dropped: malformed, or their stored message vanished
	Expired     int64    // leases that had expired and were made due again
	Messages    []Claimed
}

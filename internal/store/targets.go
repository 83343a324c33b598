package store

import (
	"strconv"
	"strings"
)

// targets.go owns the names the store's callers give what they act on: a topic partition and a
// consumer group on it. The store builds every key from them.

// Partition is one partition of a topic: N from 0 to the topic's partition count - 1.
type Partition struct {
	Topic string
	N     int
}

// Group is a consumer group on one topic partition.
type Group struct {
	Partition
	Name string
}

// Of returns group Name on partition p.
func (p Partition) Of(name string) Group { return Group{Partition: p, Name: name} }

// name names the partition in the key space: the topic itself for partition 0, so that a topic
// keeps its keys when it is split, else the topic, '#' and N.
func (p Partition) name() string {
	if p.N == 0 {
		return p.Topic
	}
	return p.Topic + "#" + strconv.Itoa(p.N)
}

// HasPartitionSuffix reports whether name ends in '#' and digits, as the key-space names of
// partitions do, so that no topic can take a partition's name.
func HasPartitionSuffix(name string) bool { return partitionSuffix(name) > 0 }

// partitionSuffix returns the length of a trailing '#' and digits in name, 0 if there is none.
func partitionSuffix(name string) int {
	i := strings.LastIndexByte(name, '#')
	if i < 0 || i == len(name)-1 {
		return 0
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return 0
		}
	}
	return len(name) - i
}

// SetKind is which sorted set of messages a Set names.
type SetKind int

const (
	// DueSet is a consumer group's due set: its messages scheduled, due or not.
	DueSet SetKind = iota + 1
	// LeaseSet is a consumer group's lease set: its messages in flight.
	LeaseSet
	// ParkedSet is a topic partition's parked set: the messages that wait for a first consumer
	// group, such as the dead letters on a dead-letter topic.
	ParkedSet
)

// Set names one sorted set of messages, for the Inspector's reads.
type Set struct {
	Kind SetKind
	// Group is the consumer group of a due or lease set; of a parked set, only its Partition
	// counts.
	Group Group
}

// Due returns the due set of group g.
func Due(g Group) Set { return Set{Kind: DueSet, Group: g} }

// Leases returns the lease set of group g.
func Leases(g Group) Set { return Set{Kind: LeaseSet, Group: g} }

// Parked returns the parked set of partition p.
func Parked(p Partition) Set { return Set{Kind: ParkedSet, Group: Group{Partition: p}} }

// Span selects the members of a set by due time, as list.lua and purge.lua read it.
type Span string

const (
	// All is every member.
	All Span = "all"
	// DueNow are the members due now: scored up to the Redis clock.
	DueNow Span = "due"
	// Later are the members due later.
	Later Span = "scheduled"
)

package store

// fortest.go owns the hooks that tests outside the package use to look at what Redis holds.
// Nothing else calls them.

// KeyNames are the keys of one consumer group and its topic partition.
type KeyNames struct {
	// The group's due and lease sets, its epoch, and the removal's due and lease sets.
	Due, Lease, Epoch, RemovedDue, RemovedLease string
	// The partition's messages hash, parked set, new-group window flag, group set, and the
	// parked set as the removal of its last group takes it.
	Messages, Parked, Window, Groups, RemovedParked string
	// Debounce is the prefix of the partition's debounce caps: Debounce + key is a key's cap.
	Debounce string
	// Registry is the topic registry.
	Registry string
}

// KeyNamesForTest returns the keys of group on partition p under prefix.
func KeyNamesForTest(prefix string, p Partition, group string) KeyNames {
	k := keySpace{prefix: prefix}
	tk, gk := k.topic(p), k.group(p.Of(group))
	return KeyNames{
		Due: gk.due, Lease: gk.lease, Epoch: gk.epoch, RemovedDue: gk.removedDue, RemovedLease: gk.removedLease,
		Messages: tk.messages, Parked: tk.parked, Window: tk.window, Groups: tk.groups, RemovedParked: tk.removedParked,
		Debounce: tk.debounce,
		Registry: k.topicRegistry(),
	}
}

// PartitionNameForTest names partition p in the key space: partition 0 of a topic of that name
// has the same keys.
func PartitionNameForTest(p Partition) string { return p.name() }

// Package store is the only code that sends Redis commands about the queue's data. Its Lua
// scripts (lua/, assembled in scripts.go) do the work; every script has one Go wrapper, run
// through one path (run.go), and every key comes from the key layout (keys.go). Callers name
// what they act on with typed targets (Partition, Group, Set), never with key names, and a
// message with the one format of ids.go.
//
// The files, by job: store.go the Store value and its options; run.go the runner; scripts.go
// the table of scripts; keys.go the key layout; ids.go the ID, member and ref format;
// errors.go the errors; publish.go storing messages; consume.go a consumer's operations;
// bykey.go the operations by key, ref and batch key; admin.go the operator's writes and
// counts; browse.go the operator's reads; fortest.go the hooks of tests outside the package.
package store

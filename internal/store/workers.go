package store

import (
	"context"
	"strings"
)

// workers.go owns the Redis side of the records of running workers: one heartbeat script call
// per worker per refresh, its deletion, and the read of one page (worker_*.lua,
// workers_list.lua). A worker is named by its member, its kind, a space and its ID, so that the
// index read in member order lists the workers of one kind together.

var (
	// A heartbeat may run on a full Redis: it replaces a record of bounded size, and operators
	// need to see who still drains the queue when Redis is full.
	workerBeatScript  = mustScript(scriptSpec{file: "worker_beat", allowOOM: true})
	workerGoneScript  = mustScript(scriptSpec{file: "worker_gone", allowOOM: true})
	workersListScript = mustScript(scriptSpec{file: "workers_list", allowOOM: true})
)

// WorkerMember is the member that names a worker of kind with ID id.
func WorkerMember(kind, id string) string { return kind + " " + id }

// WorkerRecord is one worker's record as workers_list.lua reads it.
type WorkerRecord struct {
	Kind, ID string
	// ExpiresMs and BeatMs are when the record expires and when it was last refreshed, Unix ms
	// on the Redis clock.
	ExpiresMs, BeatMs int64
	// Record is the JSON the worker wrote.
	Record string
}

// BeatWorker records the heartbeat of worker member with its JSON record for ttlMs on the Redis
// clock, and returns the Redis clock's now and the record's expiry, Unix ms.
func (s Store) BeatWorker(ctx context.Context, member string, ttlMs int64, record string) (int64, int64, error) {
	res, err := s.run(ctx, s.client, workerBeatScript, s.keys.workers(), member, ttlMs, record)
	if err != nil {
		return 0, 0, err
	}
	reply, _ := res.([]any)
	if len(reply) != 2 {
		return 0, 0, unexpected(workerBeatScript, res)
	}
	return asInt(reply[0]), asInt(reply[1]), nil
}

// WorkerGone deletes the record of worker member; it reports whether there was one.
func (s Store) WorkerGone(ctx context.Context, member string) (bool, error) {
	res, err := s.run(ctx, s.client, workerGoneScript, s.keys.workers(), member)
	if err != nil {
		return false, err
	}
	return asInt(res) == 1, nil
}

// ListWorkers reads one page of at most limit worker records in member order: of kind ("" for
// every kind), after member after ("" from the first). It returns the records that had not
// expired, the Redis clock's now (Unix ms), and the member to continue after ("" when no more
// follow).
func (s Store) ListWorkers(ctx context.Context, kind, after string, limit int) ([]WorkerRecord, int64, string, error) {
	from, to := "-", "+"
	if kind != "" {
		from, to = "["+kind+" ", "("+kind+"!"
	}
	if after != "" {
		from = "(" + after
	}
	res, err := s.run(ctx, s.client, workersListScript, s.keys.workers()[1:], from, to, limit)
	if err != nil {
		return nil, 0, "", err
	}
	reply, _ := res.([]any)
	if len(reply) < 2 || len(reply)%2 != 0 {
		return nil, 0, "", unexpected(workersListScript, res)
	}
	next, _ := reply[1].(string)
	var recs []WorkerRecord
	for i := 2; i+1 < len(reply); i += 2 {
		member, _ := reply[i].(string)
		value, _ := reply[i+1].(string)
		if r, ok := parseWorkerRecord(member, value); ok {
			recs = append(recs, r)
		}
	}
	return recs, asInt(reply[0]), next, nil
}

// parseWorkerRecord reads a member and its "expiry lastbeat record" value; ok is false for a
// malformed one, which the caller leaves out.
func parseWorkerRecord(member, value string) (WorkerRecord, bool) {
	kind, id, ok1 := strings.Cut(member, " ")
	f := strings.SplitN(value, " ", 3)
	if !ok1 || len(f) != 3 {
		return WorkerRecord{}, false
	}
	return WorkerRecord{Kind: kind, ID: id, ExpiresMs: asInt(f[0]), BeatMs: asInt(f[1]), Record: f[2]}, true
}

package filestore

import "sync"

// recent holds completed records this process committed or read, so that
// a replay — Begin on a completed key, a sidecar's commonest store call —
// is answered from memory, without a read transaction.
//
// It never answers with what the database no longer holds. The directory
// has one process (lock.go), and every write of that process goes through
// the committer (commit.go), which, after each commit, removes from recent
// every key the commit wrote or deleted and adds the records it completed
// (apply). An entry ends by the store's clock at its expiry, as the
// database's entry does. A record read from the database is added only if
// no commit was applied since the read began (fill): one that deleted it
// in between would otherwise be undone.
//
// It is bounded: records larger than recentMaxRecord are not kept, and
// past recentBytes an arbitrary entry makes room.
type recent struct {
	mu    sync.Mutex
	seq   uint64 // commits applied so far
	m     map[string]entry
	bytes int64
}

const (
	// recentBytes bounds the encoded records recent holds.
	recentBytes = 4 << 20
	// recentMaxRecord is the largest encoded record recent keeps.
	recentMaxRecord = 64 << 10
)

// change is a key a commit wrote or deleted: e is the record it now
// holds, nil for anything else (a lease, a deletion).
type change struct {
	key string
	e   *entry
}

// get returns key's record if recent holds it and now is before its
// expiry.
func (r *recent) get(key string, now int64) (entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok {
		return entry{}, false
	}
	if now >= e.expires {
		r.drop(key)
		return entry{}, false
	}
	return e, true
}

// version is what fill compares: the commits applied so far.
func (r *recent) version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// fill adds key's record e, read from the database after version
// returned v, unless a commit was applied since.
func (r *recent) fill(key string, e entry, v uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seq == v {
		r.put(key, e)
	}
}

// apply brings recent up to date with a commit's changes, in order; when
// the commit failed (committed false) every change is a removal.
func (r *recent) apply(changes []change, committed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	for _, c := range changes {
		r.drop(c.key)
		if committed && c.e != nil {
			r.put(c.key, *c.e)
		}
	}
}

func (r *recent) put(key string, e entry) {
	size := int64(len(key) + len(e.enc))
	if len(e.enc) > recentMaxRecord {
		return
	}
	r.drop(key)
	for k := range r.m {
		if r.bytes+size <= recentBytes {
			break
		}
		r.drop(k)
	}
	if r.m == nil {
		r.m = make(map[string]entry)
	}
	r.m[key] = e
	r.bytes += size
}

func (r *recent) drop(key string) {
	if e, ok := r.m[key]; ok {
		r.bytes -= int64(len(key) + len(e.enc))
		delete(r.m, key)
	}
}

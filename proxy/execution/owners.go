package execution

import (
	"context"
	"hash/maphash"
	"sync"
)

// Owners tracks the keys this process is executing, so that requests
// waiting on them (concurrent: wait) wake the moment they settle instead of
// polling the store, and Abort reaches every call. Keys owned by another
// replica are polled. Init readies it.
type Owners struct {
	seed   maphash.Seed
	shards [64]ownerShard
}

type ownerShard struct {
	mu sync.Mutex
	m  map[string]owner
}

type owner struct {
	done   chan struct{}
	cancel context.CancelCauseFunc // cancels the upstream call, for Abort
	// prev is an earlier owner of the same key in this process, still
	// running after its lease expired and the key was taken again: rare,
	// but Abort must still reach it.
	prev *owner
}

// Init readies o for use.
func (o *Owners) Init() {
	o.seed = maphash.MakeSeed()
	for i := range o.shards {
		o.shards[i].m = make(map[string]owner)
	}
}

func (o *Owners) shard(key string) *ownerShard {
	return &o.shards[maphash.String(o.seed, key)%uint64(len(o.shards))]
}

// Add notes that this process executes key, whose call cancel cancels;
// the channel closes when Remove says it settled.
func (o *Owners) Add(key string, cancel context.CancelCauseFunc) chan struct{} {
	ch := make(chan struct{})
	s := o.shard(key)
	s.mu.Lock()
	next := owner{done: ch, cancel: cancel}
	if prev, ok := s.m[key]; ok {
		p := prev // escapes: allocated only when the key is owned twice
		next.prev = &p
	}
	s.m[key] = next
	s.mu.Unlock()
	return ch
}

// Remove notes that the execution of key that Add gave ch settled, and
// closes ch.
func (o *Owners) Remove(key string, ch chan struct{}) {
	s := o.shard(key)
	s.mu.Lock()
	if top, ok := s.m[key]; ok {
		switch {
		case top.done == ch && top.prev == nil:
			delete(s.m, key)
		case top.done == ch:
			s.m[key] = *top.prev
		default:
			for p := &top; p.prev != nil; p = p.prev {
				if p.prev.done == ch {
					p.prev = p.prev.prev
					break
				}
			}
			s.m[key] = top
		}
	}
	s.mu.Unlock()
	close(ch)
}

// CancelAll cancels every upstream call in flight.
func (o *Owners) CancelAll() {
	for i := range o.shards {
		s := &o.shards[i]
		s.mu.Lock()
		for _, ow := range s.m {
			for p := &ow; p != nil; p = p.prev {
				p.cancel(nil)
			}
		}
		s.mu.Unlock()
	}
}

// Done returns the channel that closes when this process settles key, or
// nil (which never fires) when another process owns it.
func (o *Owners) Done(key string) <-chan struct{} {
	s := o.shard(key)
	s.mu.Lock()
	ch := s.m[key].done
	s.mu.Unlock()
	return ch
}

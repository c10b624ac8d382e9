package memory

import (
	"math"
	"unsafe"
)

// The slabs that hold a shard's keys and encoded records start at
// minSlabSize and double with the shard, up to slabSize, so that a store
// holding few records holds little memory (64 shards × 64 KiB would be
// 4 MiB). An item larger than a quarter of slabSize gets a slab of its own.
const (
	minSlabSize = 4 << 10
	slabSize    = 64 << 10
)

// table is one shard's entries, laid out so that the garbage collector
// has almost nothing to trace: the index maps a key's hash to a slot, the
// slots hold no pointers, and keys and encoded records lie back to back in
// a few large byte slabs. Kept as ordinary Go values — a map from key
// string to an entry holding the encoding — each record was one or more
// heap objects that every collection marked again, in a random order
// through memory; with a hundred thousand records that was 10 ms of CPU
// per collection on the proxy's one CPU.
//
// Slabs are append-only: bytes once written are never written again, so a
// decoded record may alias them after its entry is gone (its slice keeps
// the slab alive). A slab whose bytes no entry refers to any more is
// dropped; when the slabs held grow past one and a half times the bytes
// entries refer to, the table copies its entries into new slabs
// (compact), so expired and deleted records never pin much memory.
//
// A table is not safe for concurrent use: its shard's mutex guards it.
type table struct {
	index map[uint64]int32 // key hash → first slot of the keys with that hash
	slots []slot
	free  []int32 // unused slots
	count int

	slabs     []slab
	freeSlabs []int32 // indexes of dropped slabs, for reuse
	cur       int32   // the slab being filled, or -1
	held      int     // capacity of the slabs held
	live      int     // bytes of them that entries refer to

	sweepAt int // the slot the sweeper looks at next
}

// slot is an entry with its place in the index. hash and next chain the
// keys that share a hash (with a 64-bit hash, almost never more than one).
type slot struct {
	e    entry
	hash uint64
	next int32 // the next slot with the same hash, or -1
	used bool
}

type slab struct {
	b    []byte
	live int // bytes entries refer to
	refs int // entries that refer to it (an empty key and lease take no bytes)
}

// tableStart is the number of entries a table has room for before it
// first grows.
const tableStart = 16

func newTable() table {
	return table{index: make(map[uint64]int32, tableStart), slots: make([]slot, 0, tableStart), cur: -1}
}

// find returns the slot holding key and its entry (good as at's), or -1
// and nil.
func (t *table) find(h uint64, key string) (int32, *entry) {
	i, ok := t.index[h]
	if !ok {
		return -1, nil
	}
	for ; i >= 0; i = t.slots[i].next {
		if e := &t.slots[i].e; t.key(e) == key {
			return i, e
		}
	}
	return -1, nil
}

// key returns e's key. It aliases a slab: callers that keep it beyond the
// shard's lock need not copy it (slab bytes never change), but a copy lets
// the slab go once its entries are gone.
func (t *table) key(e *entry) string {
	b := t.slabs[e.slab].b[e.off : e.off+e.keyLen]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// enc returns e's encoding: its record, or its lease's description (nil
// when it describes nothing). It aliases a slab, and
// it is capped, so that an append cannot write into the slab.
func (t *table) enc(e *entry) []byte {
	if e.encLen == 0 {
		return nil
	}
	start := e.off + e.keyLen
	return t.slabs[e.slab].b[start : start+e.encLen : start+e.encLen]
}

// fits reports whether a key and an encoding of these lengths can be
// stored: the table addresses its items with 32-bit offsets.
func fits(keyLen, encLen int) bool {
	return uint64(keyLen)+uint64(encLen) <= math.MaxUint32
}

// put stores e under key, with its encoding enc (see entry) written after
// the key, and returns e's slot. An entry key held before is
// replaced. Like remove, it may move every entry's bytes (compact): an
// entry copied out of the table before refers to its bytes no longer.
func (t *table) put(h uint64, key string, e entry, enc []byte) int32 {
	e.keyLen, e.encLen = uint32(len(key)), uint32(len(enc))
	e.slab, e.off = t.write(key, enc)
	if i, old := t.find(h, key); old != nil {
		t.release(old)
		*old = e
		t.compactIfSparse()
		return i
	}
	var i int32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.slots = append(t.slots, slot{})
		i = int32(len(t.slots) - 1)
	}
	head, ok := t.index[h]
	if !ok {
		head = -1
	}
	t.slots[i] = slot{e: e, hash: h, next: head, used: true}
	t.index[h] = i
	t.count++
	return i
}

// remove deletes the entry in slot i.
func (t *table) remove(i int32) {
	s := &t.slots[i]
	if head := t.index[s.hash]; head == i {
		if s.next < 0 {
			delete(t.index, s.hash)
		} else {
			t.index[s.hash] = s.next
		}
	} else {
		for j := head; j >= 0; j = t.slots[j].next {
			if t.slots[j].next == i {
				t.slots[j].next = s.next
				break
			}
		}
	}
	t.release(&s.e)
	*s = slot{}
	t.free = append(t.free, i)
	t.count--
	t.compactIfSparse()
}

// write appends key and enc to a slab and returns where they start.
func (t *table) write(key string, enc []byte) (int32, uint32) {
	n := len(key) + len(enc)
	var i int32
	switch {
	case n > slabSize/4:
		i = t.newSlab(n) // a slab of its own, never filled further
	case t.cur < 0 || cap(t.slabs[t.cur].b)-len(t.slabs[t.cur].b) < n:
		size := minSlabSize
		for size < slabSize && (size < n || size < t.held/4) {
			size *= 2
		}
		if t.cur >= 0 && t.slabs[t.cur].refs == 0 {
			t.dropSlab(t.cur) // filled, and nothing refers to it any more
		}
		i = t.newSlab(size)
		t.cur = i
	default:
		i = t.cur
	}
	sl := &t.slabs[i]
	off := len(sl.b)
	sl.b = append(append(sl.b, key...), enc...)
	sl.live += n
	sl.refs++
	t.live += n
	return i, uint32(off)
}

func (t *table) newSlab(size int) int32 {
	sl := slab{b: make([]byte, 0, size)}
	t.held += size
	if n := len(t.freeSlabs); n > 0 {
		i := t.freeSlabs[n-1]
		t.freeSlabs = t.freeSlabs[:n-1]
		t.slabs[i] = sl
		return i
	}
	t.slabs = append(t.slabs, sl)
	return int32(len(t.slabs) - 1)
}

// release gives back the slab bytes e refers to, dropping a slab no entry
// refers to any more (except the one being filled). Slabs are dropped by
// count of entries, not of bytes: an empty key and lease take none.
func (t *table) release(e *entry) {
	n := int(e.keyLen + e.encLen)
	sl := &t.slabs[e.slab]
	sl.live -= n
	sl.refs--
	t.live -= n
	if sl.refs == 0 && e.slab != t.cur {
		t.dropSlab(e.slab)
	}
}

func (t *table) dropSlab(i int32) {
	t.held -= cap(t.slabs[i].b)
	t.slabs[i] = slab{}
	t.freeSlabs = append(t.freeSlabs, i)
}

// compactIfSparse copies every entry's bytes into new slabs once the slabs
// held exceed the bytes referred to by half and by two slabs: each copy of
// the live bytes then follows the release of at least half as many, so
// compaction costs a constant per byte released.
func (t *table) compactIfSparse() {
	if t.held <= t.live+t.live/2+2*slabSize {
		return
	}
	old := t.slabs
	t.slabs, t.freeSlabs, t.cur, t.held, t.live = nil, nil, -1, 0, 0
	for i := range t.slots {
		s := &t.slots[i]
		if !s.used {
			continue
		}
		e := &s.e
		b := old[e.slab].b[e.off : e.off+e.keyLen+e.encLen]
		e.slab, e.off = t.write(unsafe.String(unsafe.SliceData(b), int(e.keyLen)), b[e.keyLen:])
	}
}

// at returns the entry in slot i. The pointer is good until the next put
// or remove; a caller that keeps the entry past either, or past the
// shard's lock, copies it.
func (t *table) at(i int32) *entry { return &t.slots[i].e }

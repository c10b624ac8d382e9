package memory

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestTableKeepsKeysThatShareAHash checks the chains of keys whose hashes
// collide: each is found, replaced and removed on its own, whichever place
// it has in its chain.
func TestTableKeepsKeysThatShareAHash(t *testing.T) {
	for _, gone := range []string{"a", "b", "c"} {
		t.Run("remove "+gone, func(t *testing.T) {
			tb := newTable()
			for _, k := range []string{"a", "b", "c"} {
				tb.put(7, k, entry{expires: int64(k[0])}, []byte("record of "+k))
			}
			tb.put(7, "b", entry{expires: 'B'}, []byte("new record of b")) // replaces b in place
			if tb.count != 3 {
				t.Fatalf("count %d, want 3", tb.count)
			}
			tb.remove(tb.slot(7, gone))
			for _, k := range []string{"a", "b", "c"} {
				i, found := tb.find(7, k)
				if k == gone {
					if i >= 0 || found != nil {
						t.Errorf("%s still found after its removal", k)
					}
					continue
				}
				if i < 0 || found != tb.at(i) {
					t.Fatalf("%s lost when %s was removed", k, gone)
				}
				e := *found
				want := "record of " + k
				if k == "b" {
					want = "new record of b"
				}
				if got := string(tb.enc(&e)); got != want || tb.key(&e) != k {
					t.Errorf("%s: key %q, record %q; want %q", k, tb.key(&e), got, want)
				}
			}
			if tb.slot(8, "a") >= 0 {
				t.Error("a key found under another hash")
			}
		})
	}
}

// TestTableKeepsTheFirstSlotsKeyWhenItsChainsHeadGoes: a chain whose
// next key is in slot 0 is still found after its head is removed.
func TestTableKeepsTheFirstSlotsKeyWhenItsChainsHeadGoes(t *testing.T) {
	tb := newTable()
	tb.put(7, "a", entry{}, []byte("record of a")) // slot 0
	tb.put(7, "b", entry{}, []byte("record of b")) // the chain's head, then a
	tb.remove(tb.slot(7, "b"))
	i := tb.slot(7, "a")
	if i < 0 {
		t.Fatal("a, in slot 0, lost when b, the head of its chain, was removed")
	}
	if e := tb.at(i); tb.key(e) != "a" || string(tb.enc(e)) != "record of a" {
		t.Errorf("a: key %q, record %q", tb.key(e), tb.enc(e))
	}
}

// TestTableMovesNoBytesWhileItIsDense: a removal compacts only slabs
// that hold far more than their entries refer to; in a dense table every
// other entry keeps its bytes where they are.
func TestTableMovesNoBytesWhileItIsDense(t *testing.T) {
	tb := newTable()
	for _, k := range []string{"a", "b", "c"} {
		tb.put(7, k, entry{}, []byte("record of "+k))
	}
	before := *tb.at(tb.slot(7, "c"))
	tb.remove(tb.slot(7, "b"))
	after := *tb.at(tb.slot(7, "c"))
	if after.slab != before.slab || after.off != before.off {
		t.Errorf("c moved from slab %d offset %d to slab %d offset %d when b was removed from a dense table",
			before.slab, before.off, after.slab, after.off)
	}
}

// TestTableCountsTheBytesItsEntriesReferTo: the count compaction decides
// by is exactly the keys and encodings of the entries present.
func TestTableCountsTheBytesItsEntriesReferTo(t *testing.T) {
	tb := newTable()
	// Keys longer than their encodings, as a lease that describes
	// nothing has.
	tb.put(1, "a-long-key", entry{}, []byte("enc"))
	tb.put(2, "another-long-key", entry{}, []byte("e"))
	tb.put(1, "a-long-key", entry{}, []byte("replaced"))
	tb.remove(tb.slot(2, "another-long-key"))
	if want := len("a-long-key") + len("replaced"); tb.live != want {
		t.Errorf("live = %d bytes, want %d", tb.live, want)
	}
}

// TestTableDropsAFilledSlabNothingRefersTo: when the slab being filled is
// full and none of its entries is left, it is given back as the next slab
// is made, the first slab of the table too.
func TestTableDropsAFilledSlabNothingRefersTo(t *testing.T) {
	tb := newTable()
	rec := bytes.Repeat([]byte{1}, 1000)
	for _, k := range []string{"a", "b", "c"} { // three fill most of the first slab
		tb.put(uint64(k[0]), k, entry{}, rec)
	}
	for _, k := range []string{"a", "b", "c"} {
		tb.remove(tb.slot(uint64(k[0]), k))
	}
	i := tb.put(4, "d", entry{}, bytes.Repeat([]byte{2}, 2000)) // does not fit in what is left
	if e := tb.at(i); tb.held != cap(tb.slabs[e.slab].b) {
		t.Errorf("slabs hold %d bytes, want only d's slab of %d", tb.held, cap(tb.slabs[e.slab].b))
	}
}

// TestTableCompactsAndNeverRewritesWhatItHandedOut checks that removing
// most entries gives their memory back (the slabs are compacted), that the
// entries left keep their keys and records, and that bytes handed out
// before — a decoded record's body aliases them — are never written again.
func TestTableCompactsAndNeverRewritesWhatItHandedOut(t *testing.T) {
	const n = 5000
	tb := newTable()
	record := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 300) }
	for i := range n {
		tb.put(uint64(i), fmt.Sprint("key-", i), entry{}, record(i))
	}
	full := tb.held
	// A reader holds the record of key-1 while everything moves.
	e1 := *tb.at(tb.slot(1, "key-1"))
	held := tb.enc(&e1)
	for i := range n {
		if i%10 != 0 {
			tb.remove(tb.slot(uint64(i), fmt.Sprint("key-", i)))
		}
	}
	for i := n; i < n+n/10; i++ { // new writes must not land on old bytes
		tb.put(uint64(i), fmt.Sprint("key-", i), entry{}, record(i))
	}
	if !bytes.Equal(held, record(1)) {
		t.Fatal("bytes handed out before were overwritten")
	}
	if tb.held > full/2 {
		t.Errorf("slabs hold %d bytes after removing 90%% of %d, want compacted well below", tb.held, full)
	}
	if tb.held > tb.live+tb.live/2+2*slabSize {
		t.Errorf("slabs hold %d bytes for %d referred to", tb.held, tb.live)
	}
	for i := range n + n/10 {
		key := fmt.Sprint("key-", i)
		j := tb.slot(uint64(i), key)
		if kept := i%10 == 0 || i >= n; kept != (j >= 0) {
			t.Fatalf("%s: found %v, want %v", key, j >= 0, kept)
		}
		if j < 0 {
			continue
		}
		e := *tb.at(j)
		if tb.key(&e) != key || !bytes.Equal(tb.enc(&e), record(i)) {
			t.Fatalf("%s: key %q or its record changed", key, tb.key(&e))
		}
	}
}

// TestTableGivesLargeItemsASlabOfTheirOwn checks that a record larger than
// a quarter slab is not copied into a shared slab, and that its memory goes
// with it.
func TestTableGivesLargeItemsASlabOfTheirOwn(t *testing.T) {
	tb := newTable()
	tb.put(1, "small", entry{}, []byte("x"))
	before := tb.held
	big := bytes.Repeat([]byte("y"), slabSize)
	i := tb.put(2, "big", entry{}, big)
	if tb.held < before+slabSize {
		t.Fatalf("held %d after a %d-byte record, want a slab of its own", tb.held, len(big))
	}
	e := *tb.at(i)
	if !bytes.Equal(tb.enc(&e), big) {
		t.Fatal("the large record changed")
	}
	tb.remove(i)
	if tb.held != before {
		t.Errorf("held %d after removing the large record, want %d", tb.held, before)
	}
}

// TestTableAgreesWithAMap drives a table with random puts, removals and
// lookups — keys that collide, an empty key, items from none to 70 KB
// bytes, so that slabs fill, drop and compact — against a plain map, and
// checks that bytes handed out on the way are never changed and that the
// table's accounts match what it holds.
func TestTableAgreesWithAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tb := newTable()
	model := map[string][]byte{}
	hash := func(k string) uint64 { return uint64(len(k)) % 5 } // many collisions
	type handedOut struct{ got, want []byte }
	var handed []handedOut
	for step := range 100000 {
		k := ""
		if r.IntN(50) > 0 {
			k = fmt.Sprint("k", r.IntN(400))
		}
		switch op := r.IntN(10); {
		case op < 5:
			var v []byte
			if r.IntN(3) > 0 {
				size := []int{1, 50, 3000, 17000, 70000}[r.IntN(5)]
				v = bytes.Repeat([]byte{byte(step)}, 1+r.IntN(size))
			}
			tb.put(hash(k), k, entry{}, v)
			model[k] = v
		case op < 8:
			if i := tb.slot(hash(k), k); i >= 0 {
				tb.remove(i)
			}
			delete(model, k)
		default:
			i := tb.slot(hash(k), k)
			want, ok := model[k]
			if (i >= 0) != ok {
				t.Fatalf("step %d: %q found %v, want %v", step, k, i >= 0, ok)
			}
			if !ok {
				continue
			}
			e := *tb.at(i)
			got := tb.enc(&e)
			if !bytes.Equal(got, want) || tb.key(&e) != k {
				t.Fatalf("step %d: %q holds key %q and a record of %d bytes, want %d", step, k, tb.key(&e), len(got), len(want))
			}
			if len(handed) < 2000 {
				handed = append(handed, handedOut{got, bytes.Clone(got)})
			}
		}
		if tb.count != len(model) {
			t.Fatalf("step %d: count %d, want %d", step, tb.count, len(model))
		}
	}
	for _, h := range handed {
		if !bytes.Equal(h.got, h.want) {
			t.Fatal("bytes handed out were written again")
		}
	}
	live, held, refs := 0, 0, 0
	for k, v := range model {
		live += len(k) + len(v)
	}
	for _, sl := range tb.slabs {
		held += cap(sl.b)
		refs += sl.refs
	}
	if tb.live != live || tb.held != held || refs != len(model) {
		t.Errorf("table accounts live %d, held %d, %d references; it holds %d live bytes in %d of slabs for %d entries",
			tb.live, tb.held, refs, live, held, len(model))
	}
	if tb.held > tb.live+tb.live/2+2*slabSize {
		t.Errorf("slabs hold %d bytes for %d referred to", tb.held, tb.live)
	}
}

// TestTableKeepsASlabAnEmptyItemRefersTo checks that an entry taking no
// bytes (an empty key's lease) keeps its slab: were the slab dropped when
// its last byte went, it would be dropped again with that entry, and two
// later records would share one slab — one lost, the other replayed under
// both keys.
func TestTableKeepsASlabAnEmptyItemRefersTo(t *testing.T) {
	tb := newTable()
	tb.put(1, "a", entry{}, []byte("record of a"))
	empty := tb.put(2, "", entry{}, nil)                          // no bytes, in a's slab
	tb.put(3, "filler", entry{}, bytes.Repeat([]byte("f"), 8000)) // a new slab to fill
	tb.remove(tb.slot(1, "a"))
	if tb.slot(2, "") != empty {
		t.Fatal("the empty key is lost")
	}
	tb.remove(empty)
	x, y := bytes.Repeat([]byte("x"), 20000), bytes.Repeat([]byte("y"), 20000)
	tb.put(4, "tenant-x", entry{}, x)
	tb.put(5, "tenant-y", entry{}, y)
	for h, want := range map[uint64][]byte{4: x, 5: y} {
		key := "tenant-" + string(want[0])
		i := tb.slot(h, key)
		if i < 0 {
			t.Fatalf("%s lost", key)
		}
		if e := *tb.at(i); !bytes.Equal(tb.enc(&e), want) {
			t.Fatalf("%s holds another record", key)
		}
	}
}

// TestTableTakesItemsUpToItsOffsetsReach: a key and encoding fit while
// together they are addressable with 32-bit offsets, and not a byte more.
func TestTableTakesItemsUpToItsOffsetsReach(t *testing.T) {
	if !fits(0, math.MaxUint32) || !fits(10, math.MaxUint32-10) {
		t.Error("an item of exactly math.MaxUint32 bytes does not fit")
	}
	if fits(1, math.MaxUint32) || fits(11, math.MaxUint32-10) {
		t.Error("an item of math.MaxUint32+1 bytes fits")
	}
}

// slot returns the slot holding key, or -1.
func (t *table) slot(h uint64, key string) int32 {
	i, _ := t.find(h, key)
	return i
}

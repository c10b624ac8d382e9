package memory

import (
	"bytes"
	"fmt"
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
			tb.remove(tb.find(7, gone))
			for _, k := range []string{"a", "b", "c"} {
				i := tb.find(7, k)
				if k == gone {
					if i >= 0 {
						t.Errorf("%s still found after its removal", k)
					}
					continue
				}
				if i < 0 {
					t.Fatalf("%s lost when %s was removed", k, gone)
				}
				e := tb.entryAt(i)
				want := "record of " + k
				if k == "b" {
					want = "new record of b"
				}
				if got := string(tb.enc(&e)); got != want || tb.key(&e) != k {
					t.Errorf("%s: key %q, record %q; want %q", k, tb.key(&e), got, want)
				}
			}
			if tb.find(8, "a") >= 0 {
				t.Error("a key found under another hash")
			}
		})
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
	e1 := tb.entryAt(tb.find(1, "key-1"))
	held := tb.enc(&e1)
	for i := range n {
		if i%10 != 0 {
			tb.remove(tb.find(uint64(i), fmt.Sprint("key-", i)))
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
		j := tb.find(uint64(i), key)
		if kept := i%10 == 0 || i >= n; kept != (j >= 0) {
			t.Fatalf("%s: found %v, want %v", key, j >= 0, kept)
		}
		if j < 0 {
			continue
		}
		e := tb.entryAt(j)
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
	e := tb.entryAt(i)
	if !bytes.Equal(tb.enc(&e), big) {
		t.Fatal("the large record changed")
	}
	tb.remove(i)
	if tb.held != before {
		t.Errorf("held %d after removing the large record, want %d", tb.held, before)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// testCompleteTwice: a completion retried after its answer was lost (same
// token, same record) succeeds; a different record with that token is a
// lost lease, and the first record stays.
func testCompleteTwice(t *testing.T, h *harness) {
	for name, rec := range records() {
		t.Run(name, func(t *testing.T) {
			key := h.key(name)
			tok := h.acquire(key, rec.Fingerprint, time.Minute)
			for i := range 2 {
				// A fresh copy of the header map each time: Go may iterate
				// it in another order, and the store must not care.
				again := *rec
				again.Header = make(map[string][]string, len(rec.Header))
				for k, v := range rec.Header {
					again.Header[k] = v
				}
				if err := h.Store.Complete(context.Background(), key, tok, &again, time.Hour); err != nil {
					t.Fatalf("Complete #%d with the same token and record: %v", i+1, err)
				}
			}
			other := &store.Record{Status: 500, Fingerprint: rec.Fingerprint, CreatedAt: rec.CreatedAt}
			if err := h.Store.Complete(context.Background(), key, tok, other, time.Hour); !errors.Is(err, store.ErrLockLost) {
				t.Fatalf("Complete of another record after completion = %v, want ErrLockLost", err)
			}
			assertRecord(t, h.begin(key, fingerprint(3), time.Minute).Record, rec)
		})
	}
}

func testInspectRecord(t *testing.T, h *harness) {
	rec := records()["binary body"]
	key := h.key("k")
	tok := h.acquire(key, rec.Fingerprint, time.Minute)
	before := time.Now()
	h.complete(key, tok, rec, time.Hour)
	e, err := h.Store.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if e.Key != key || e.State != store.Completed || e.Fingerprint != rec.Fingerprint || e.BodyBytes != len(rec.Body) || e.Record == nil {
		t.Fatalf("Inspect = %+v, want completed %q with fingerprint, record and body size %d", e, key, len(rec.Body))
	}
	assertRecord(t, e.Record, rec)
	h.assertExpiry(e, before, time.Hour)
}

func testInspectLease(t *testing.T, h *harness) {
	key := h.key("k")
	before := time.Now()
	h.acquire(key, fingerprint(4), time.Minute)
	e, err := h.Store.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if e.Key != key || e.State != store.InFlight || e.Fingerprint != fingerprint(4) || e.Record != nil {
		t.Fatalf("Inspect = %+v, want in_flight %q with the owner's fingerprint and no record", e, key)
	}
	h.assertExpiry(e, before, time.Minute)
}

// assertExpiry checks that e expires about ttl after start. A store on a
// fake clock reports times on that clock, so only the distance is checked
// there.
func (h *harness) assertExpiry(e store.Entry, start time.Time, ttl time.Duration) {
	h.t.Helper()
	if h.Advance != nil {
		if e.ExpiresAt.IsZero() {
			h.t.Errorf("ExpiresAt is zero")
		}
		return
	}
	if e.ExpiresAt.Before(start.Add(ttl-5*time.Second)) || e.ExpiresAt.After(time.Now().Add(ttl+5*time.Second)) {
		h.t.Errorf("ExpiresAt = %v, want about %v after %v", e.ExpiresAt, ttl, start)
	}
}

func testInspectMissing(t *testing.T, h *harness) {
	if e, err := h.Store.Inspect(context.Background(), h.key("absent")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Inspect of an absent key = %+v, %v; want ErrNotFound", e, err)
	}
}

func testDeleteRecord(t *testing.T, h *harness) {
	key := h.key("k")
	tok := h.acquire(key, fingerprint(1), time.Minute)
	h.complete(key, tok, records()["empty body"], time.Hour)
	if err := h.Store.Delete(context.Background(), key); err != nil {
		t.Fatalf("Delete of a record: %v", err)
	}
	if e, err := h.Store.Inspect(context.Background(), key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Inspect after Delete = %+v, %v; want ErrNotFound", e, err)
	}
	h.acquire(key, fingerprint(2), time.Minute)
}

// testDeleteLease: deleting a lease fences its owner, even after a new
// owner took the key.
func testDeleteLease(t *testing.T, h *harness) {
	ctx := context.Background()
	key := h.key("k")
	old := h.acquire(key, fingerprint(1), time.Minute)
	if err := h.Store.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of a lease: %v", err)
	}
	if err := h.Store.Extend(ctx, key, old, time.Minute); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("Extend by the deleted lease's owner = %v, want ErrLockLost", err)
	}
	if err := h.Store.Complete(ctx, key, old, records()["empty body"], time.Hour); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("Complete by the deleted lease's owner = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, old); err != nil {
		t.Errorf("Release by the deleted lease's owner = %v, want nil", err)
	}
	tok := h.acquire(key, fingerprint(2), time.Minute)
	if err := h.Store.Complete(ctx, key, old, records()["empty body"], time.Hour); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("Complete by the deleted lease's owner after a new Begin = %v, want ErrLockLost", err)
	}
	if b := h.begin(key, fingerprint(3), time.Minute); b.State != store.InFlight || b.Fingerprint != fingerprint(2) {
		t.Fatalf("Begin = %v fp %x, want in_flight of the new owner", b.State, b.Fingerprint[:4])
	}
	h.complete(key, tok, records()["binary body"], time.Hour)
}

func testDeleteMissing(t *testing.T, h *harness) {
	if err := h.Store.Delete(context.Background(), h.key("absent")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete of an absent key = %v, want ErrNotFound", err)
	}
}

// testListPages lists in small pages and checks that each of the case's
// keys (leases and records) comes back exactly once. Other cases may share
// the backend: their keys are ignored.
func testListPages(t *testing.T, h *harness) {
	const n = 60
	want := map[string]store.State{}
	rec := records()["binary body"]
	for i := range n {
		key := h.key(fmt.Sprint("key-", i))
		tok := h.acquire(key, rec.Fingerprint, time.Minute)
		want[key] = store.InFlight
		if i%3 != 0 {
			h.complete(key, tok, rec, time.Hour)
			want[key] = store.Completed
		}
	}
	seen := h.listAll(0, 7)
	for key, st := range want {
		e, ok := seen[key]
		if !ok {
			t.Errorf("List missed %s", key)
			continue
		}
		if e.State != st {
			t.Errorf("List gave %s as %v, want %v", key, e.State, st)
		}
		if st == store.Completed && (e.Record == nil || e.BodyBytes != len(rec.Body) || e.Record.Status != rec.Status) {
			t.Errorf("List gave %s as %+v, want its record with body size %d", key, e, len(rec.Body))
		}
	}
}

func testListState(t *testing.T, h *harness) {
	lease := h.key("lease")
	h.acquire(lease, fingerprint(1), time.Minute)
	done := h.key("done")
	tok := h.acquire(done, fingerprint(1), time.Minute)
	h.complete(done, tok, records()["empty body"], time.Hour)
	for _, tc := range []struct {
		state store.State
		want  []string
	}{{store.InFlight, []string{lease}}, {store.Completed, []string{done}}, {0, []string{lease, done}}} {
		got := h.listAll(tc.state, 100)
		if len(got) != len(tc.want) {
			t.Errorf("List(%v) gave %d of the case's keys, want %v", tc.state, len(got), tc.want)
		}
		for _, k := range tc.want {
			if _, ok := got[k]; !ok {
				t.Errorf("List(%v) missed %s", tc.state, k)
			}
		}
	}
}

// listAll pages through List and returns the case's entries by key,
// failing on a key returned twice within a page or a page over the limit.
// A key may come back on a later page: Redis's SCAN may return a key again
// while its table is being resized, and List keeps no state between pages.
func (h *harness) listAll(state store.State, limit int) map[string]store.Entry {
	h.t.Helper()
	seen := map[string]store.Entry{}
	cursor := ""
	for page := 0; ; page++ {
		inPage := map[string]bool{}
		if page > 10000 {
			h.t.Fatalf("List did not finish in 10000 pages")
		}
		entries, next, err := h.Store.List(context.Background(), state, cursor, limit)
		if err != nil {
			h.t.Fatalf("List(%v, %q, %d): %v", state, cursor, limit, err)
		}
		if len(entries) > limit {
			h.t.Fatalf("List page of %d entries, limit %d", len(entries), limit)
		}
		for _, e := range entries {
			if state != 0 && e.State != state {
				h.t.Errorf("List(%v) gave %s in state %v", state, e.Key, e.State)
			}
			if len(e.Key) < len(h.prefix) || e.Key[:len(h.prefix)] != h.prefix {
				continue
			}
			if inPage[e.Key] {
				h.t.Errorf("List gave %s twice in one page", e.Key)
			}
			inPage[e.Key] = true
			seen[e.Key] = e
		}
		if next == "" {
			return seen
		}
		cursor = next
	}
}

func testHealth(t *testing.T, h *harness) {
	hl, err := h.Store.Health(context.Background())
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if hl.Server == "" || hl.Full {
		t.Fatalf("Health = %+v, want a server name and not full", hl)
	}
}

// testListLookup: a listing gives each record's lookup, by which the key
// API finds a raw key's records across scopes.
func testListLookup(t *testing.T, h *harness) {
	key := h.key("found")
	rec := records()["with its request"]
	tok := h.acquire(key, rec.Fingerprint, time.Minute)
	h.complete(key, tok, rec, time.Hour)
	e, ok := h.listAll(store.Completed, 100)[key]
	if !ok || e.Record == nil || e.Record.Lookup != rec.Lookup {
		t.Fatalf("List gave %s as %+v, want its record with lookup %x", key, e, rec.Lookup)
	}
}

// Lister is a store's listing, as the operator API pages through it.
type Lister interface {
	List(ctx context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error)
}

// PagesOfBoundedSize lists every entry of s, page after page under a
// limit that never binds, and checks that a page of more than one entry
// holds at most max bytes, as size counts an entry; that the listing ends
// after wantPages pages; and that it lists each of keys once, and nothing
// else. A store's own test fills it and sets its page bound first.
func PagesOfBoundedSize(t *testing.T, s Lister, size func(store.Entry) int, max, wantPages int, keys map[string]int) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]int{}
	cursor := ""
	pages := 1
	for ; ; pages++ {
		if pages > 20 {
			t.Fatalf("no end after %d pages; seen %v", pages, seen)
		}
		page, next, err := s.List(ctx, 0, cursor, 1000)
		if err != nil {
			t.Fatalf("List after %q: %v", cursor, err)
		}
		read := 0
		for _, e := range page {
			seen[e.Key]++
			read += size(e)
		}
		if len(page) > 1 && read > max {
			t.Errorf("a page of %d keys read %d bytes, more than %d", len(page), read, max)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if pages != wantPages {
		t.Errorf("the listing took %d pages, want %d", pages, wantPages)
	}
	for k := range keys {
		if seen[k] != 1 {
			t.Errorf("%s listed %d times, want once", k, seen[k])
		}
	}
	if len(seen) != len(keys) {
		t.Errorf("listed %v, want the %d keys", seen, len(keys))
	}
}

// ListAll lists the entries of s in every state, page after page of at
// most limit, and returns them in the order listed: at most 20 pages, so
// that a cursor that never ends shows as keys listed again.
func ListAll(t *testing.T, s Lister, limit int) []store.Entry {
	t.Helper()
	var got []store.Entry
	cursor := ""
	for range 20 {
		page, next, err := s.List(context.Background(), 0, cursor, limit)
		if err != nil {
			t.Fatalf("limit %d: List after %q: %v", limit, cursor, err)
		}
		got = append(got, page...)
		if cursor = next; cursor == "" {
			break
		}
	}
	return got
}

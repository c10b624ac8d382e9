package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestListCursorReadsBackWhatItWrote checks that a List cursor names the
// master, SCAN cursor and last key it was written with, and that a cursor
// any of whose three parts does not decode is refused, not read as the
// start of a listing.
func TestListCursorReadsBackWhatItWrote(t *testing.T) {
	for _, p := range []listPos{{}, {addr: "10.0.0.7:6379", scan: 1 << 40, after: "idem:{k.1}"}, {scan: 3}} {
		got, err := parseCursor(p.String())
		if err != nil || got != p {
			t.Errorf("parseCursor(%q) = %+v, %v; want %+v", p.String(), got, err, p)
		}
	}
	if got, err := parseCursor(""); err != nil || got != (listPos{}) {
		t.Errorf(`parseCursor("") = %+v, %v; want the start`, got, err)
	}
	for _, c := range []string{"x", "YQ.1", "YQ.1.YQ.1", "!.1.YQ", "YQ.one.YQ", "YQ.-1.YQ", "YQ.1.!"} {
		if got, err := parseCursor(c); err == nil {
			t.Errorf("parseCursor(%q) = %+v; want it refused as malformed", c, got)
		}
	}
}

// TestListResumesJustAfterTheLastKeyReturned checks where a page that
// ended inside a SCAN batch resumes: at the first key above the last one
// returned, whether that key is still there or gone.
func TestListResumesJustAfterTheLastKeyReturned(t *testing.T) {
	keys := []string{"a", "b", "c"}
	for _, c := range []struct {
		after string
		want  int
	}{{"a", 1}, {"b", 2}, {"c", 3}, {"bb", 2}, {"0", 0}, {"d", 3}} {
		if got := sort(keys, c.after); got != c.want {
			t.Errorf("sort(%q, %q) = %d, want %d", keys, c.after, got, c.want)
		}
	}
}

// TestListRefusesANonPositiveLimit checks that a page of no entries is
// refused rather than read as a page without bound.
func TestListRefusesANonPositiveLimit(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	for _, limit := range []int{0, -1} {
		if _, _, err := s.List(context.Background(), 0, "", limit); err == nil {
			t.Errorf("List with limit %d: no error", limit)
		}
	}
	if _, _, err := s.List(context.Background(), 0, "", 1); err != nil {
		t.Errorf("List with limit 1: %v", err)
	}
}

// TestListPageFilledByTheLastKeyEndsTheListing checks that a page filled
// by the last key of the last SCAN batch of the last master ends the
// listing: no cursor to a further page.
func TestListPageFilledByTheLastKeyEndsTheListing(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	ctx := context.Background()
	const n = 7
	for i := range n {
		if _, err := s.Begin(ctx, fmt.Sprint("k", i), store.Lease{}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	entries, next, err := s.List(ctx, 0, "", n)
	if err != nil || len(entries) != n || next != "" {
		t.Errorf("List of %d keys, %d a page: %d entries, next %q, %v; want all of them and no next page", n, n, len(entries), next, err)
	}
}

package redisstore

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
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

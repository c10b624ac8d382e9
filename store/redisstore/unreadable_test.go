package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestUnreadableEntryIsListedAndTheListingGoesOn: a value that does not
// decode (a newer version's record, damaged bytes) is listed as an
// unreadable record under its key, in every page size, and the keys
// around it are listed too: one such value never stops an operator from
// paging through the store.
func TestUnreadableEntryIsListedAndTheListingGoesOn(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	for _, k := range []string{"a", "b", "c", "d"} {
		b, err := s.Begin(ctx, k, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin %s = %v, %v", k, b.State, err)
		}
		if k == "d" {
			continue // d stays in flight
		}
		if err := s.Complete(ctx, k, b.Token, &store.Record{Status: 201, Body: []byte("ok")}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// b: a record of a format this version does not read; e: a value of
	// no kind it knows; f: an empty value.
	m.Set(s.redisKey("b"), string([]byte{kindRecord, 0xff, 0xfe}))
	m.SetTTL(s.redisKey("b"), time.Hour)
	m.Set(s.redisKey("e"), "garbage")
	m.Set(s.redisKey("f"), "")
	for _, limit := range []int{1, 2, 10} {
		got := storetest.ListAll(t, s, limit)
		slices.SortFunc(got, func(x, y store.Entry) int { return strings.Compare(x.Key, y.Key) })
		var keys []string
		for _, e := range got {
			keys = append(keys, e.Key)
		}
		if want := []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(keys, want) {
			t.Fatalf("limit %d: listed %q, want %q", limit, keys, want)
		}
		for _, e := range got {
			unreadable := e.Key == "b" || e.Key == "e" || e.Key == "f"
			if unreadable != errors.Is(e.Unreadable, store.ErrCorrupt) {
				t.Errorf("limit %d: %s listed with Unreadable %v", limit, e.Key, e.Unreadable)
			}
			if unreadable && (e.State != store.Completed || e.Record != nil) {
				t.Errorf("limit %d: unreadable %s listed as %v with record %v; want completed, no record", limit, e.Key, e.State, e.Record)
			}
		}
		if b := got[1]; b.ExpiresAt.IsZero() {
			t.Errorf("limit %d: unreadable b listed without its expiry", limit)
		}
	}
	inFlight, _, err := s.List(ctx, store.InFlight, "", 10)
	if err != nil || len(inFlight) != 1 || inFlight[0].Key != "d" {
		t.Errorf("List of the keys in flight = %+v, %v; want d alone", inFlight, err)
	}
}

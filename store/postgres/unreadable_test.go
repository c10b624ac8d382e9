package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestUnreadableRowIsListedAndTheListingGoesOn: a row that does not decode
// (a newer version's record, damaged bytes) is listed as an unreadable
// record under its key, in every page size, and the rows around it are
// listed too: one such row never stops an operator from paging through the
// store.
func TestUnreadableRowIsListedAndTheListingGoesOn(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "unreadable", SweepInterval: -1})
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
	// b: a record of a format this version does not read.
	if _, err := srv.Conn(t).Exec(ctx, `UPDATE unreadable SET head = '\xfffe'::bytea WHERE key = 'b'`); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 10} {
		got := storetest.ListAll(t, s, limit)
		var keys []string
		for _, e := range got {
			keys = append(keys, e.Key)
			if unreadable := e.Key == "b"; unreadable != errors.Is(e.Unreadable, store.ErrCorrupt) {
				t.Errorf("limit %d: %s listed with Unreadable %v", limit, e.Key, e.Unreadable)
			}
		}
		if want := []string{"a", "b", "c", "d"}; !slices.Equal(keys, want) {
			t.Fatalf("limit %d: listed %q, want %q", limit, keys, want)
		}
		if b := got[1]; b.State != store.Completed || b.Record != nil || b.ExpiresAt.IsZero() {
			t.Errorf("limit %d: unreadable b listed as %v, record %v, expiring %v; want completed, no record, its expiry", limit, b.State, b.Record, b.ExpiresAt)
		}
	}
	inFlight, _, err := s.List(ctx, store.InFlight, "", 10)
	if err != nil || len(inFlight) != 1 || inFlight[0].Key != "d" {
		t.Errorf("List of the keys in flight = %+v, %v; want d alone", inFlight, err)
	}
}

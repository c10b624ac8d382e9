// Package storetest is the conformance suite every idempotency store passes:
// the memory store (store/memory), the Redis store (store/redisstore)
// against miniredis, a real redis-server, a Cluster and a Sentinel setup,
// the Postgres store (store/postgres) against a real PostgreSQL server, and
// the file store (store/filestore). A kind registered in config.Store that
// is missing here, or whose package runs no test of the suite, fails
// TestEveryStoreKindIsListedAndPassesTheConformanceSuite (docs).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Store is the contract under test, store.Store: every kind's, as Open
// returns it.
type Store = store.Store

// Harness is a store under test and its clock.
type Harness struct {
	Store Store
	// Advance moves the store's clock forward (an injected clock, miniredis
	// FastForward). Nil means the store runs on real time: the suite then
	// uses short leases and waits for them to pass.
	Advance func(d time.Duration)
	// Lease is the lease of the expiry cases on real time; 0 means
	// realLease. A store whose operations may take longer than realLease
	// (one reached through more hops, one whose replicas acknowledge its
	// writes, one whose new connections authenticate) sets one above the
	// longest an operation of it takes on a busy machine — its timeout,
	// where that is short — so that no case's lease runs out between two
	// of its commands.
	Lease time.Duration
}

// realLease is the lease used for expiry cases on stores with a real clock:
// long enough to survive a scheduling hiccup between two commands, short
// enough to keep the suite fast.
const realLease = 200 * time.Millisecond

// Run runs every conformance case against a fresh store from newStore. Keys
// are unique per case, so a factory may share one backend between cases.
func Run(t *testing.T, newStore func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"BeginAcquires", testBeginAcquires},
		{"BeginSeesInFlight", testBeginSeesInFlight},
		{"RaceExactlyOneAcquires", testRace},
		{"CompleteThenBeginReplays", testCompleteThenBegin},
		{"RetriedCompletionIsNotALostLease", testCompleteTwice},
		{"CompleteKeepsNothingOfTheRecord", testCompleteKeepsNothingOfTheRecord},
		{"InspectRecord", testInspectRecord},
		{"SealedRecordIsKeptWhole", testSealedRecordIsKeptWhole},
		{"InspectLease", testInspectLease},
		{"LeaseDescriptionRoundTrips", testLeaseDescriptionRoundTrips},
		{"InspectMissing", testInspectMissing},
		{"DeleteRecord", testDeleteRecord},
		{"DeleteLeaseFencesOwner", testDeleteLease},
		{"DeleteMissing", testDeleteMissing},
		{"ListPagesEveryKeyOnce", testListPages},
		{"ListFiltersByState", testListState},
		{"ListGivesTheRecordsLookup", testListLookup},
		{"Health", testHealth},
		{"ExpiredLeaseFencesOldOwner", testLeaseExpiry},
		{"ReleaseWrongTokenIsNoop", testReleaseWrongToken},
		{"ReleaseThenBeginAcquires", testReleaseThenBegin},
		{"RecordExpires", testRecordTTL},
		{"ExpiredKeyIsRemembered", testExpiredKeyIsRemembered},
		{"TombstonesOffTakeTheLease", testTombstonesOff},
		{"ExpiredKeyIsRefusedForItsWholeWindow", testExpiredKeyIsRefusedForItsWholeWindow},
		{"StaleCompletionIsFencedWithTombstones", testStaleCompletionIsFencedWithTombstones},
		{"ExtendKeepsLock", testExtend},
		{"CompleteAfterReleaseLost", testCompleteAfterRelease},
		{"ManyKeys", testManyKeys},
		{"Ping", testPing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &harness{Harness: newStore(t), t: t, prefix: t.Name() + "/"}
			c.fn(t, h)
		})
	}
}

// harness wraps the store with methods that fail the test on unexpected
// errors.
type harness struct {
	Harness
	t      *testing.T
	prefix string
}

func (h *harness) key(name string) string { return h.prefix + name }

// lease is the lease for cases that let it expire.
func (h *harness) lease() time.Duration {
	if h.Advance != nil {
		return 10 * time.Second
	}
	if h.Lease > 0 {
		return h.Lease
	}
	return realLease
}

// pass lets d elapse on the store's clock. On real time this is the thing
// being waited for, so there is nothing to poll.
func (h *harness) pass(d time.Duration) {
	if h.Advance != nil {
		h.Advance(d)
		return
	}
	time.Sleep(d)
}

func (h *harness) begin(key string, fp store.Fingerprint, lease time.Duration) store.BeginResult {
	h.t.Helper()
	b, err := h.Store.Begin(context.Background(), key, store.Lease{Fingerprint: fp}, lease)
	if err != nil {
		h.t.Fatalf("Begin(%q): %v", key, err)
	}
	return b
}

func (h *harness) acquire(key string, fp store.Fingerprint, lease time.Duration) string {
	h.t.Helper()
	b := h.begin(key, fp, lease)
	if b.State != store.Acquired || b.Token == "" {
		h.t.Fatalf("Begin(%q) = %v token %q, want acquired with a token", key, b.State, b.Token)
	}
	return b.Token
}

// acquireEventually retries Begin until it acquires: on real time an expiry
// is observed a little after the lease ends.
func (h *harness) acquireEventually(key string, fp store.Fingerprint, lease time.Duration) string {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := h.begin(key, fp, lease)
		if b.State == store.Acquired {
			return b.Token
		}
		if h.Advance != nil || time.Now().After(deadline) {
			h.t.Fatalf("Begin(%q) = %v after expiry, want acquired", key, b.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) complete(key, token string, rec *store.Record, ttl time.Duration) {
	h.t.Helper()
	if err := h.Store.Complete(context.Background(), key, token, rec, ttl); err != nil {
		h.t.Fatalf("Complete(%q): %v", key, err)
	}
}

func fingerprint(b byte) store.Fingerprint {
	var fp store.Fingerprint
	for i := range fp {
		fp[i] = b + byte(i)
	}
	return fp
}

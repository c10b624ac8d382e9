package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestMarkerTagIsTheFirstInTheMastersSlots checks which tag names a
// Cluster master's marker: the first of "0", "1", … whose slot lies in
// one of its ranges, a range's first and last slots included. The names
// stay those every version of the store uses, so a proxy started later
// finds the markers an earlier one kept.
func TestMarkerTagIsTheFirstInTheMastersSlots(t *testing.T) {
	slot := func(tag string) int { return keySlot(tag) }
	for _, c := range []struct {
		ranges [][2]int
		want   string
	}{
		{[][2]int{{0, 16383}}, "0"},
		{[][2]int{{slot("0"), slot("0")}}, "0"},
		{[][2]int{{slot("1"), slot("1")}}, "1"},
		{[][2]int{{slot("3"), slot("2")}}, "2"}, // slot("3") < slot("2"): both ends included
		{[][2]int{{slot("2") + 1, slot("2") + 1}, {slot("3"), slot("3")}}, "3"},
	} {
		got, ok := firstTag(c.ranges)
		if !ok || got != c.want {
			t.Errorf("firstTag(%v) = %q, %v; want %q", c.ranges, got, ok, c.want)
		}
	}
}

// TestMarkWrittenLongerThanHalfItsTTLAgoIsNotCompared checks that a mark
// this process last wrote more than markTTL/2 ago (Redis unreachable that
// long), which may have expired meanwhile, is not taken for a loss when
// found behind; one written since is.
func TestMarkWrittenLongerThanHalfItsTTLAgoIsNotCompared(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	ctx := context.Background()
	check := func() []Loss {
		t.Helper()
		lost, err := s.checkEpochs(ctx)
		if err != nil {
			t.Fatalf("checkEpochs: %v", err)
		}
		return lost
	}
	check()
	check()
	k := s.markerKey("0")
	setBack := func() {
		t.Helper()
		if err := m.Set(s.markKey(k), "1"); err != nil {
			t.Fatal(err)
		}
	}

	known := s.epochs.known[k]
	known.at = time.Now().Add(-markTTL/2 - time.Minute)
	s.epochs.known[k] = known
	setBack()
	if lost := check(); len(lost) != 0 {
		t.Errorf("a mark written %v ago, found behind: %v; want it not compared", markTTL/2+time.Minute, lost)
	}

	check()
	setBack()
	if lost := check(); len(lost) != 1 || lost[0].Cause != "rolled_back" {
		t.Errorf("a mark written just before, found behind: %v; want it rolled back", lost)
	}
}

// TestAcknowledgedMarkOutlivesAnUnacknowledgedAdvance checks that a check
// whose advance no replica acknowledged leaves the last acknowledged mark
// as what is compared: a Redis found below that mark on the next check
// lost acknowledged writes, and it is reported.
func TestAcknowledgedMarkOutlivesAnUnacknowledgedAdvance(t *testing.T) {
	s, master, replica := patientlyReplicated(t)
	ctx := context.Background()
	forgot(t, s)
	forgot(t, s) // acknowledged: mark 2
	mark := s.markKey(s.markerKey("0"))
	replica.Pause()
	if got := forgot(t, s); len(got) != 0 { // mark 3, unacknowledged
		replica.Resume()
		t.Fatalf("a check with the replica paused: %q", got)
	}
	replica.Resume()
	if err := master.Client(t).Set(ctx, mark, "1", markTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if got := forgot(t, s); len(got) != 1 || !strings.Contains(got[0], "older copy") {
		t.Fatalf("Redis below the last acknowledged mark, after an unacknowledged advance: %q; want one loss naming the older copy", got)
	}
}

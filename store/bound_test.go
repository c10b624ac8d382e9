package store

import (
	"strings"
	"testing"
)

// A bounded store's max_bytes must be a bound (at least one byte), and a
// when_full built in code must be one of the configuration's words; each
// problem names its key.
func TestCheckBoundNamesEachProblemsKey(t *testing.T) {
	for _, tc := range []struct {
		maxBytes int64
		whenFull WhenFull
		want     []string // the keys of the problems, in order
	}{
		{1, Reject, nil},
		{1, EvictOldest, nil},
		{0, Reject, []string{"max_bytes"}},
		{-1, EvictOldest, []string{"max_bytes"}},
		{1, EvictOldest + 1, []string{"when_full"}},
		{0, EvictOldest + 1, []string{"max_bytes", "when_full"}},
	} {
		var got []string
		for _, p := range CheckBound(tc.maxBytes, tc.whenFull) {
			got = append(got, p.Key)
			if p.Reason == "" {
				t.Errorf("CheckBound(%d, %d): %s without a reason", tc.maxBytes, tc.whenFull, p.Key)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("CheckBound(%d, %d) = %v, want %v", tc.maxBytes, tc.whenFull, got, tc.want)
		}
	}
}

// when_full reads and writes the configuration's words, and refuses any
// other, leaving the value as it was.
func TestWhenFullIsReadByItsWords(t *testing.T) {
	for w, word := range map[WhenFull]string{Reject: "reject", EvictOldest: "evict_oldest"} {
		var got WhenFull = 9
		if err := got.UnmarshalText([]byte(word)); err != nil || got != w {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", word, got, err, w)
		}
		if b, _ := w.MarshalText(); string(b) != word {
			t.Errorf("MarshalText(%v) = %q, want %q", w, b, word)
		}
	}
	got := EvictOldest
	if err := got.UnmarshalText([]byte("drop")); err == nil || got != EvictOldest {
		t.Errorf(`UnmarshalText("drop") = %v, %v; want an error and the value kept`, got, err)
	}
}

//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFillStoresEveryRecordAndAccountsForIt(t *testing.T) {
	const n = 2000
	fp, err := fill(n)
	if err != nil {
		t.Fatal(err)
	}
	if fp.records != n || fp.accounted < int64(n*fp.encoded) {
		t.Errorf("fill(%d): %d records, %d bytes accounted; want %d records, at least %d bytes", n, fp.records, fp.accounted, n, n*fp.encoded)
	}
	if fp.heapAfter <= fp.heapBefore || fp.rssBefore <= 0 || fp.rssSettled <= 0 {
		t.Errorf("fill(%d): heap %d → %d, RSS %d → %d; want growth and readable RSS", n, fp.heapBefore, fp.heapAfter, fp.rssBefore, fp.rssSettled)
	}
	var out bytes.Buffer
	fp.write(&out)
	for _, want := range []string{"2000 records", "B/record", "RSS after a collection"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestStoreKeysLookLikeTheProxys: 128 bits in hex, distinct.
func TestStoreKeysLookLikeTheProxys(t *testing.T) {
	seen := map[string]bool{}
	for i := range 1000 {
		k := storeKey(i)
		if len(k) != 32 || strings.Trim(k, "0123456789abcdef") != "" || seen[k] {
			t.Fatalf("storeKey(%d) = %q: want 32 hex digits, unique", i, k)
		}
		seen[k] = true
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tidempotency-pro\nVmPeak:\t 1000 kB\nVmRSS:\t   12345 kB\nThreads:\t5\n"
	if got, want := parseVmRSS(status), int64(12345<<10); got != want {
		t.Errorf("parseVmRSS = %d, want %d", got, want)
	}
	if got := parseVmRSS("Name:\tx\n"); got != -1 {
		t.Errorf("parseVmRSS without VmRSS = %d, want -1", got)
	}
	if got := rss(); got <= 0 {
		t.Errorf("rss() = %d for this process", got)
	}
}

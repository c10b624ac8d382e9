package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// The whole exposition of the binary passes the Prometheus linter: names,
// units, help texts, counter suffixes.
func TestExpositionPassesLint(t *testing.T) {
	st := memory.New(memory.Options{MaxBytes: 1 << 20})
	t.Cleanup(func() { st.Close() })
	reg, _, _ := newRegistry(st)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// The memory store's size is scraped from its own figures at every scrape.
func TestMemoryStoreSizeIsExposed(t *testing.T) {
	st := memory.New(memory.Options{MaxBytes: 1 << 20})
	t.Cleanup(func() { st.Close() })
	reg, _, _ := newRegistry(st)
	ctx := context.Background()
	res, err := st.Begin(ctx, "k1", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "k1", res.Token, &store.Record{Status: 200, Body: []byte("hello")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	want := st.Stats()
	if want.Records != 1 || want.Bytes == 0 {
		t.Fatalf("memory Stats = %+v after one record", want)
	}
	expo := `
# HELP idempotency_proxy_store_records Completed records held by the memory or file store.
# TYPE idempotency_proxy_store_records gauge
idempotency_proxy_store_records 1
# HELP idempotency_proxy_store_evictions_total Completed records the memory or file store dropped to make room (when_full: evict_oldest).
# TYPE idempotency_proxy_store_evictions_total counter
idempotency_proxy_store_evictions_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expo),
		"idempotency_proxy_store_records", "idempotency_proxy_store_evictions_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "idempotency_proxy_store_bytes", "idempotency_proxy_store_eviction_unsafe",
		"idempotency_proxy_admin_operations_total"); err != nil || n < 3 {
		t.Errorf("store bytes, eviction_unsafe and admin operations series: %d, %v", n, err)
	}
}

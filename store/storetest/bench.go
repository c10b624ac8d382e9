package storetest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Benchmark measures the hot paths of s: Begin on a fresh key, Complete of
// an owned lease, and Begin on a completed key (the replay read), with a
// typical small JSON response, one call at a time and from concurrent
// callers.
func Benchmark(b *testing.B, s Store) {
	ctx := context.Background()
	rec := &store.Record{
		Status: 201,
		Header: map[string][]string{
			"Content-Type": {"application/json"},
			"Location":     {"/v1/charges/ch_123"},
		},
		Body:        []byte(`{"id":"ch_123","amount":1000,"currency":"eur","status":"succeeded"}`),
		Fingerprint: fingerprint(1),
		CreatedAt:   time.UnixMilli(1_700_000_000_000),
	}
	// A lease as the proxy takes it: described, without a trace.
	lease := describedLease(rec.Fingerprint, "/v1/charges")
	lease.TraceID = ""
	keys := func(b *testing.B, name string) []string {
		k := make([]string, b.N)
		for i := range k {
			k[i] = name + "/" + strconv.Itoa(i) + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
		}
		return k
	}
	b.Run("BeginMiss", func(b *testing.B) {
		ks := keys(b, "miss")
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := s.Begin(ctx, ks[i], lease, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Complete", func(b *testing.B) {
		ks := keys(b, "complete")
		tokens := make([]string, b.N)
		for i := range ks {
			bg, err := s.Begin(ctx, ks[i], lease, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			tokens[i] = bg.Token
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := s.Complete(ctx, ks[i], tokens[i], rec, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same under concurrency, as a proxy serving many clients calls
	// it: 16 callers per CPU, each a Begin and a Complete on a key of its
	// own, and Begin on a completed key. A store that shares its round
	// trips or commits among concurrent callers shows it here.
	b.Run("MissParallel", func(b *testing.B) {
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := "pmiss/" + run + "/" + strconv.FormatInt(n.Add(1), 10)
				bg, err := s.Begin(ctx, key, lease, time.Minute)
				if err == nil {
					err = s.Complete(ctx, key, bg.Token, rec, time.Hour)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("BeginCompletedParallel", func(b *testing.B) {
		key := "preplay/" + strconv.FormatInt(time.Now().UnixNano(), 36)
		bg, err := s.Begin(ctx, key, lease, time.Minute)
		if err == nil {
			err = s.Complete(ctx, key, bg.Token, rec, time.Hour)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				got, err := s.Begin(ctx, key, lease, time.Minute)
				if err != nil || got.State != store.Completed {
					b.Errorf("Begin = %v, %v; want completed", got.State, err)
					return
				}
			}
		})
	})
	b.Run("BeginCompleted", func(b *testing.B) {
		key := "replay/" + strconv.FormatInt(time.Now().UnixNano(), 36)
		bg, err := s.Begin(ctx, key, lease, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, key, bg.Token, rec, time.Hour); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			got, err := s.Begin(ctx, key, lease, time.Minute)
			if err != nil || got.State != store.Completed {
				b.Fatalf("Begin = %v, %v; want completed", got.State, err)
			}
		}
	})
}

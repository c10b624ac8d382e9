package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// BenchmarkMissFilled runs a miss's two store operations, Begin on a new key
// then Complete, on a store already holding n records: their index lookups
// are cold once the index outgrows the CPU's caches.
func BenchmarkMissFilled(b *testing.B) {
	ctx := context.Background()
	rec := &store.Record{
		Status:    200,
		Header:    map[string][]string{"Content-Type": {"application/json"}, "Content-Length": {"215"}},
		Body:      make([]byte, 215),
		CreatedAt: time.UnixMilli(1_700_000_000_000),
	}
	lease := store.Lease{Request: store.Request{Method: "POST", Host: "billing.example", Path: "/v1/charges",
		Route: "POST /v1/charges", StartedAt: time.UnixMilli(1_764_590_400_123).UTC()}, Instance: "proxy-7f9c/4121"}
	key := func(prefix string, i int) string {
		s := sha256.Sum256([]byte(prefix + strconv.Itoa(i)))
		return hex.EncodeToString(s[:])
	}
	for _, n := range []int{0, 200_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := New(Options{})
			b.Cleanup(func() { _ = s.Close() })
			miss := func(k string) {
				bg, err := s.Begin(ctx, k, lease, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, k, bg.Token, rec, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			for i := range n {
				miss(key("fill", i))
			}
			keys := make([]string, 1<<16)
			for i := range keys {
				keys[i] = key("miss", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i%len(keys) == 0 && i > 0 {
					b.StopTimer()
					for j := range keys {
						keys[j] = key("miss"+strconv.Itoa(i), j)
					}
					b.StartTimer()
				}
				miss(keys[i%len(keys)])
			}
		})
	}
}

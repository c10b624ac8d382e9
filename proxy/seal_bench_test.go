package proxy

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/store/seal"
)

// sizedUpstream answers every request with body.
type sizedUpstream struct{ body []byte }

func (u sizedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(u.body))}},
		ContentLength: int64(len(u.body)),
		Body:          io.NopCloser(bytes.NewReader(u.body)),
		Request:       r,
	}, nil
}

// newSealRig is newBenchRig answering size-byte bodies, on a memory store
// wrapped by the seal layer (sealed: with a key; else without one, as the
// proxy runs with encryption off). The memory store evicts, so a miss
// benchmark of large bodies stays within 256 MiB.
func newSealRig(tb testing.TB, size int, sealed bool) *benchRig {
	tb.Helper()
	var kr *seal.Keyring
	if sealed {
		var err error
		kr, err = seal.Parse("bench", []byte("k1 "+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))))
		if err != nil {
			tb.Fatal(err)
		}
	}
	return sizedRig(tb, size, func(mem *memory.Store) Store { return seal.New(mem, kr) })
}

// sizedRig is newBenchRig answering size-byte bodies from the store wrap
// makes of an evicting memory store.
func sizedRig(tb testing.TB, size int, wrap func(*memory.Store) Store) *benchRig {
	mem := memory.New(memory.Options{MaxBytes: 256 << 20, WhenFull: store.EvictOldest})
	tb.Cleanup(func() { mem.Close() })
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	pol := DefaultPolicy()
	pol.MaxResponseBody = 2 << 20
	rig := newBenchRig(tb)
	h, err := New(Options{
		Upstream:  &url.URL{Scheme: "http", Host: "upstream.invalid"},
		Transport: sizedUpstream{body: body},
		Store:     wrap(mem),
		Default:   pol,
	})
	if err != nil {
		tb.Fatal(err)
	}
	rig.h = h
	return rig
}

// BenchmarkHandlerSealed measures what encryption at rest costs a request:
// the same hit and miss with the keys file set and without, at a small
// JSON answer, 16 KiB and 1 MiB (docs/performance.md, "Encryption at
// rest").
func BenchmarkHandlerSealed(b *testing.B) {
	for _, size := range []int{200, 16 << 10, 1 << 20} {
		for _, sealed := range []bool{false, true} {
			name := fmt.Sprintf("size=%d/encryption=%v", size, sealed)
			b.Run("hit/"+name, func(b *testing.B) {
				rig := newSealRig(b, size, sealed)
				const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
				rig.serve(key)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if got := rig.serve(key); got != http.StatusOK {
						b.Fatalf("status %d, want 200", got)
					}
				}
				if rig.w.header.Get("Idempotent-Replayed") != "true" {
					b.Fatal("the benchmark did not measure replays")
				}
			})
			b.Run("miss/"+name, func(b *testing.B) {
				rig := newSealRig(b, size, sealed)
				b.SetBytes(int64(size))
				defer reportCPU(b)()
				loopMisses(b, rig.serve)
			})
		}
	}
}

// reportCPU reports the process's CPU time (user and system, every thread,
// the collector's included) per iteration as cpu-ns/op, when the returned
// function runs. On a shared machine wall time counts the waits for a CPU
// too; CPU time is the cost.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// With encryption off the seal layer costs a request no allocation: the
// handler's counts on it are TestHandlerAllocations' bounds.
func TestSealLayerOffAddsNoAllocation(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector drops sync.Pool items and adds allocations")
	}
	const runs = 200
	count := func(rig *benchRig, miss bool) float64 {
		keys, i := missKeys(0, runs+1), 0
		const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
		rig.serve(key)
		return testing.AllocsPerRun(runs, func() {
			if miss {
				i++
				rig.serve(keys[i-1])
				return
			}
			rig.serve(key)
		})
	}
	for _, miss := range []bool{false, true} {
		// Each measured twice, in turn, keeping the lower: the first
		// handler of a test warms pools the later ones find full.
		direct, plain := math.Inf(1), math.Inf(1)
		for range 2 {
			direct = min(direct, count(sizedRig(t, len(benchResponseBody), func(mem *memory.Store) Store { return mem }), miss))
			plain = min(plain, count(newSealRig(t, len(benchResponseBody), false), miss))
		}
		if plain > direct {
			t.Errorf("miss=%v: %.0f allocations through the seal layer without keys, %.0f without the layer", miss, plain, direct)
		}
	}
}

package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// Handler benchmarks for the legacy-client features: a key from a JSON
// body (json:/order_id, the member last, so the whole body is scanned) and
// a canonical fingerprint, at a typical 200-byte body and at 64 KiB.
//
//	go test -run '^$' -bench 'Handler(JSONKey|Canonical)' -benchmem -benchtime 2000x ./proxy

// jsonBody returns a JSON object of about size bytes whose last member is
// "order_id": id.
func jsonBody(size int, id string) []byte {
	var b strings.Builder
	b.WriteString(`{"amount":2000,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","items":[`)
	for i := 0; b.Len() < size-80; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"sku-%06d","qty":%d}`, i, i%7+1)
	}
	b.WriteString(`],"order_id":"` + id + `"}`)
	return []byte(b.String())
}

func newPolicyBenchRig(tb testing.TB, pol Policy) *benchRig {
	tb.Helper()
	rig := newBenchRig(tb)
	st := memory.New(memory.Options{})
	tb.Cleanup(func() { st.Close() })
	h, err := New(Options{
		Upstream:  &url.URL{Scheme: "http", Host: "upstream.invalid"},
		Transport: fixedUpstream{contentLength: strconv.Itoa(len(benchResponseBody))},
		Store:     st,
		Default:   pol,
	})
	if err != nil {
		tb.Fatal(err)
	}
	rig.h = h
	return rig
}

// serveBody sends the rig's request with body and key ("" for none).
func (rig *benchRig) serveBody(body []byte, key string) int {
	if key == "" {
		delete(rig.r.Header, "Idempotency-Key")
	} else {
		rig.key[0] = key
		rig.r.Header["Idempotency-Key"] = rig.key
	}
	rig.body.Reset(body)
	rig.r.ContentLength = int64(len(body))
	rig.w.reset()
	rig.h.ServeHTTP(rig.w, rig.r)
	return rig.w.status
}

var benchSizes = []struct {
	name string
	size int
}{{"200B", 200}, {"64KiB", 64 << 10}}

func BenchmarkHandlerJSONKey(b *testing.B) {
	pol := DefaultPolicy()
	pol.Header, pol.KeySources = "", []KeySource{{Kind: KeyFromJSON, Pointer: mustPointer(b, "/order_id")}}
	for _, sz := range benchSizes {
		b.Run(sz.name+"/miss", func(b *testing.B) {
			rig := newPolicyBenchRig(b, pol)
			const batch = 256
			var bodies [][]byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%batch == 0 {
					b.StopTimer()
					bodies = bodies[:0]
					for j := range batch {
						bodies = append(bodies, jsonBody(sz.size, "o-"+strconv.Itoa(i+j)))
					}
					b.StartTimer()
				}
				if got := rig.serveBody(bodies[i%batch], ""); got != http.StatusOK {
					b.Fatalf("status %d", got)
				}
			}
		})
		b.Run(sz.name+"/hit", func(b *testing.B) {
			rig := newPolicyBenchRig(b, pol)
			body := jsonBody(sz.size, "o-1")
			rig.serveBody(body, "")
			b.ReportAllocs()
			for b.Loop() {
				if got := rig.serveBody(body, ""); got != http.StatusOK {
					b.Fatalf("status %d", got)
				}
			}
			if rig.w.header.Get("Idempotent-Replayed") != "true" {
				b.Fatal("not replayed")
			}
		})
	}
}

func BenchmarkHandlerCanonical(b *testing.B) {
	pol := DefaultPolicy()
	pol.FingerprintJSON = FingerprintCanonical
	for _, sz := range benchSizes {
		body := jsonBody(sz.size, "o-1")
		b.Run(sz.name+"/miss", func(b *testing.B) {
			rig := newPolicyBenchRig(b, pol)
			loopMisses(b, func(key string) int { return rig.serveBody(body, key) })
		})
		b.Run(sz.name+"/hit", func(b *testing.B) {
			rig := newPolicyBenchRig(b, pol)
			rig.serveBody(body, "k-1")
			b.ReportAllocs()
			for b.Loop() {
				if got := rig.serveBody(body, "k-1"); got != http.StatusOK {
					b.Fatalf("status %d", got)
				}
			}
		})
	}
}

// A json: source reads the key where the body lies: the body is read once
// and never copied, so a replay of a 64 KiB body allocates it once.
func TestJSONKeySourceNeverCopiesTheBody(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector adds allocations")
	}
	pol := DefaultPolicy()
	pol.Header, pol.KeySources = "", []KeySource{{Kind: KeyFromJSON, Pointer: mustPointer(t, "/order_id")}}
	rig := newPolicyBenchRig(t, pol)
	body := jsonBody(64<<10, "o-1")
	rig.serveBody(body, "")
	const runs = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if got := rig.serveBody(body, ""); got != http.StatusOK {
			t.Fatalf("status %d", got)
		}
	}
	runtime.ReadMemStats(&after)
	perRequest := (after.TotalAlloc - before.TotalAlloc) / runs
	if limit := uint64(len(body)) * 3 / 2; perRequest > limit {
		t.Errorf("%d bytes allocated per request for a %d-byte body, want at most %d: the body is copied", perRequest, len(body), limit)
	}
}

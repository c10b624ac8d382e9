package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// benchItems is n bytes or more of an order's line items, a JSON array.
func benchItems(n int) string {
	var b strings.Builder
	b.WriteString(`[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(`,`)
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%06d","name":"Widget \"deluxe\" %d","qty":%d,"price":{"amount":%d.99,"currency":"EUR"},"tags":["a","b"],"gift":false,"note":null}`, i, i, i%7+1, i*13%1000)
	}
	b.WriteString(`]`)
	return b.String()
}

// benchKeyBodies are request bodies of about size bytes with the key first
// or last, for json:/id and json:/a/b/order_id.
func benchKeyBodies(size int) map[string][]byte {
	const id = `"id":"evt_1NqTq2Lk8rJ4YbQx9ZfHcW3m"`
	const order = `"a":{"x":[1,{"y":null}],"b":{"sku":"x","order_id":918273645}}`
	head := `"object":"event","type":"charge.succeeded","created":1700000000,"livemode":false,"items":`
	items := benchItems(size - len(head) - len(order) - 8)
	return map[string][]byte{
		"id/first":       []byte(`{` + id + `,` + head + items + `}`),
		"id/last":        []byte(`{` + head + items + `,` + id + `}`),
		"order_id/first": []byte(`{` + order + `,` + head + items + `}`),
		"order_id/last":  []byte(`{` + head + items + `,` + order + `}`),
	}
}

func BenchmarkKeySourceHeader(b *testing.B) {
	for _, tc := range []struct{ name, value string }{
		{"raw", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"sf-string", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := &http.Request{Header: http.Header{"Idempotency-Key": {tc.value}}, URL: &url.URL{}}
			sources := []KeySource{headerKeySource("Idempotency-Key")}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := requestKeyFrom(r, sources, nil, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkKeySourceQuery(b *testing.B) {
	r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: "page=2&idempotency_key=8e03978e-40d5-43e8-bc93-6894a57f9324&x=1"}}
	sources := mustSources(b, "header:Idempotency-Key", "query:idempotency_key")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := requestKeyFrom(r, sources, nil, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeySourceJSON(b *testing.B) {
	r := &http.Request{Header: http.Header{}, URL: &url.URL{}}
	for _, size := range []int{200, 64 << 10} {
		bodies := benchKeyBodies(size)
		for _, name := range []string{"id/first", "id/last", "order_id/first", "order_id/last"} {
			body := bodies[name]
			ptr := "json:/id"
			if strings.HasPrefix(name, "order_id") {
				ptr = "json:/a/b/order_id"
			}
			sources := mustSources(b, "header:Idempotency-Key", ptr)
			b.Run(fmt.Sprintf("%dB/%s", size, name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, _, err := requestKeyFrom(r, sources, body, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkKeySourceBodySHA256(b *testing.B) {
	r := &http.Request{Header: http.Header{}, URL: &url.URL{}}
	body := benchKeyBodies(64 << 10)["id/last"]
	sources := mustSources(b, "body_sha256")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := requestKeyFrom(r, sources, body, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONKeyDecoderTokens resolves the same pointers with
// encoding/json's Decoder, the alternative to the scanner: it copies the
// body into its buffer and allocates for tokens and skipped values.
func BenchmarkJSONKeyDecoderTokens(b *testing.B) {
	for _, size := range []int{200, 64 << 10} {
		bodies := benchKeyBodies(size)
		for _, name := range []string{"id/last", "order_id/last"} {
			body := bodies[name]
			tokens := []string{"id"}
			if strings.HasPrefix(name, "order_id") {
				tokens = []string{"a", "b", "order_id"}
			}
			b.Run(fmt.Sprintf("%dB/%s", size, name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if !decoderLookup(body, tokens) {
						b.Fatal("not found")
					}
				}
			})
		}
	}
}

func decoderLookup(body []byte, tokens []string) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for _, want := range tokens {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return false
		}
		for {
			if !dec.More() {
				return false
			}
			name, err := dec.Token()
			if err != nil {
				return false
			}
			if name == want {
				break
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return false
			}
		}
	}
	tok, err := dec.Token()
	return err == nil && tok != nil
}

func BenchmarkCanonicalFingerprint(b *testing.B) {
	small := []byte(`{"type":"charge.succeeded","id":"evt_1NqTq2Lk8rJ4YbQx9ZfHcW3m","object":"event","data":{"object":{"id":"ch_3N","currency":"usd","amount":2000}},"livemode":false,"created":1700000000}`)
	large := benchKeyBodies(64 << 10)["id/last"]
	ts := []jsonread.Pointer{mustPointer(b, "/created")}
	for _, tc := range []struct {
		name   string
		body   []byte
		mode   FingerprintJSON
		ignore []jsonread.Pointer
	}{
		{"200B/raw", small, FingerprintRaw, nil},
		{"200B/canonical", small, FingerprintCanonical, nil},
		{"200B/ignore", small, FingerprintCanonical, ts},
		{"64KiB/raw", large, FingerprintRaw, nil},
		{"64KiB/canonical", large, FingerprintCanonical, nil},
		{"64KiB/ignore", large, FingerprintCanonical, ts},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var scratch []byte
			h := sha256.New()
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				var hashed []byte
				hashed, scratch, _ = fingerprintBody(scratch, tc.body, tc.mode, tc.ignore)
				h.Reset()
				h.Write(hashed)
				h.Sum(nil)
			}
		})
	}
}

// Allocations are the same on every machine, unlike times, so they are
// pinned here: a header key costs what parseKey costs (nothing), a JSON key
// only its string, a canonical fingerprint nothing once its buffers are
// warm.
func TestKeySourceAndCanonicalAllocations(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector drops sync.Pool items and adds allocations")
	}
	bodies := benchKeyBodies(64 << 10)
	header := &http.Request{Header: http.Header{"Idempotency-Key": {`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}}, URL: &url.URL{RawQuery: "idempotency_key=k1"}}
	bare := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: "a=1&idempotency_key=k1"}}
	ignore := []jsonread.Pointer{mustPointer(t, "/created")}
	var scratch []byte
	headerOnly := []KeySource{headerKeySource("Idempotency-Key")}
	query := mustSources(t, "header:Idempotency-Key", "query:idempotency_key")
	json := mustSources(t, "json:/a/b/order_id")
	tests := []struct {
		name string
		max  float64
		run  func()
	}{
		{"header", 0, func() { requestKeyFrom(header, headerOnly, nil, false) }},
		{"query", 0, func() { requestKeyFrom(bare, query, nil, false) }},
		{"json", 1, func() { requestKeyFrom(bare, json, bodies["order_id/last"], true) }},
		{"canonical", 0, func() {
			_, scratch, _ = fingerprintBody(scratch, bodies["id/last"], FingerprintCanonical, ignore)
		}},
	}
	for _, tc := range tests {
		tc.run() // warm the pools and buffers
		if got := testing.AllocsPerRun(50, tc.run); got > tc.max {
			t.Errorf("%s: %.0f allocations, want at most %.0f", tc.name, got, tc.max)
		}
	}
}

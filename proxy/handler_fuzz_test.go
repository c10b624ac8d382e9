package proxy

import (
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// FuzzHandlerKeyAndFingerprint sends arbitrary bodies and key headers
// through the whole handler — key sources in order, a json: pointer, the
// body hash, a canonical fingerprint with an ignored member — and twice,
// so that the replay decision runs too. Whatever the input, the answer is
// the upstream's or a 4xx: never a 5xx, never a panic.
//
//	go test -run '^$' -fuzz FuzzHandlerKeyAndFingerprint -fuzztime 30s ./proxy
func FuzzHandlerKeyAndFingerprint(f *testing.F) {
	for _, seed := range []struct{ key, body string }{
		{"", `{"id":"evt_1","ts":1}`},
		{"", `{"id":42,"data":{"object":{"id":"ch_1"}}}`},
		{"", `{"id":123456789012345678901234567890}`},
		{"", `{"id":"a\u0000b"}`},
		{"", `{"id":` + strings.Repeat("[", 100)},
		{"", "a=1&b=2"},
		{"", ""},
		{"k-1", `{"ts":2,"id":"x"}`},
		{`"quoted"`, `[]`},
		{"a,b", `{}`},
		{"", `{"id":"a","ID":"b"}`},
		{"k-2", "\xef\xbb\xbf{\"ts\":1,\"TS\":2}"},
	} {
		f.Add(seed.key, []byte(seed.body))
	}
	pol := DefaultPolicy()
	pol.Header = ""
	pol.KeySources = []KeySource{headerKeySource("Idempotency-Key"), {Kind: KeyFromJSON, Pointer: mustPointer(f, "/id")}, {Kind: KeyFromBodySHA256}}
	pol.FingerprintIgnore = []jsonread.Pointer{mustPointer(f, "/ts")}
	pol.MaxRequestBody = 1 << 16
	rig := newPolicyBenchRig(f, pol)
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		for range 2 {
			status := rig.serveBody(body, key)
			if status >= 500 || status == 0 {
				t.Fatalf("key %q, body %q: status %d", key, body, status)
			}
		}
	})
}

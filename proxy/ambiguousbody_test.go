package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// JSON the proxy reads must mean one thing to every reader
// (docs/request-handling.md, "Bodies that can be read two ways").

// checkAmbiguous asserts r is the 400 ambiguous-body refusal.
func checkAmbiguous(t *testing.T, what string, r *response) {
	t.Helper()
	if r.StatusCode != http.StatusBadRequest || r.problemType() != "ambiguous-body" {
		t.Errorf("%s: %d %s, want 400 ambiguous-body", what, r.StatusCode, r.problemType())
	}
	if !strings.Contains(r.body, "repeats in an object") {
		t.Errorf("%s: detail %s does not say what repeats", what, r.body)
	}
}

// With a canonical fingerprint, {"amount":1,"Amount":2} and
// {"Amount":2,"amount":1} are amounts 2 and 1 to a Go upstream: neither
// is forwarded, neither locks its key, and the key still serves a body
// that means one thing.
func TestCaseVariantNamesAreRefusedNotReplayed(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.FingerprintJSON = FingerprintCanonical }))
	checkAmbiguous(t, "first", e.do(t, "POST", "/charges", "k-1", `{"amount":1,"Amount":2}`))
	checkAmbiguous(t, "reordered", e.do(t, "POST", "/charges", "k-1", `{"Amount":2,"amount":1}`))
	checkAmbiguous(t, "nested", e.do(t, "POST", "/charges", "k-1", `{"lines":[{"sku":"a","Sku":"b"}]}`))
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("upstream called %d times, want 0", got)
	}
	if got := e.outcomes(defaultRoute, OutcomeAmbiguous); got != 3 {
		t.Errorf("ambiguous = %v, want 3", got)
	}
	if r := e.do(t, "POST", "/charges", "k-1", `{"amount":2}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("the key afterwards: %d replayed=%v, want executed (nothing was locked)", r.StatusCode, r.replayed())
	}
	// fingerprint_ignore reads the body too, and its pointer is no excuse.
	ign := newEnv(t, nil, withPolicy(func(p *Policy) { p.FingerprintIgnore = []jsonread.Pointer{mustPointer(t, "/ts")} }))
	checkAmbiguous(t, "ignored name repeated", ign.do(t, "POST", "/charges", "k-2", `{"ts":1,"TS":2,"amount":1}`))
	// A raw fingerprint with a header key reads no JSON: the upstream's
	// business, forwarded.
	raw := newEnv(t, nil)
	if r := raw.do(t, "POST", "/charges", "k-3", `{"amount":1,"Amount":2}`); r.StatusCode != http.StatusCreated {
		t.Errorf("raw fingerprint: %d, want forwarded", r.StatusCode)
	}
}

// {"id":"ord_1","id":"ord_9"} is ord_9 to Go, Python and JavaScript:
// keyed ord_1, a later {"id":"ord_9"} would execute the order again. It is
// refused, and so is {"id":"ord_5","ID":"ord_7"}, ord_7 to a Go upstream.
func TestRepeatedKeyNameIsRefusedNotKeyed(t *testing.T) {
	for _, require := range []bool{false, true} {
		e := newEnv(t, nil, withPolicy(keySources(t, "json:/id")), withPolicy(func(p *Policy) { p.RequireKey = require }))
		checkAmbiguous(t, "exact repeat", e.do(t, "POST", "/orders", "", `{"id":"ord_1","id":"ord_9"}`))
		checkAmbiguous(t, "case variant", e.do(t, "POST", "/orders", "", `{"id":"ord_5","ID":"ord_7"}`))
		if got := e.up.calls.Load(); got != 0 {
			t.Fatalf("upstream called %d times, want 0", got)
		}
		for _, id := range []string{"ord_1", "ord_9", "ord_5", "ord_7"} {
			if r := e.do(t, "POST", "/orders", "", `{"id":"`+id+`"}`); r.StatusCode != http.StatusCreated || r.replayed() {
				t.Errorf("%s afterwards: %d replayed=%v, want executed (nothing was locked)", id, r.StatusCode, r.replayed())
			}
		}
	}
}

// -0 and 0 are one number, so one key; a body with a byte order mark
// has its key.
func TestJSONKeyReadsAsEveryReaderDoes(t *testing.T) {
	e := newEnv(t, nil, withPolicy(keySources(t, "json:/id")), withPolicy(func(p *Policy) { p.RequireKey = true }))
	first := e.do(t, "POST", "/orders", "", `{"id":0}`)
	if again := e.do(t, "POST", "/orders", "", `{"id":-0}`); again.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("-0 after 0: %d, want 422 (the same key, another body)", again.StatusCode)
	}
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("0: %d", first.StatusCode)
	}
	bom := "\xef\xbb\xbf{\"id\":\"evt_1\"}"
	e.do(t, "POST", "/orders", "", bom)
	if r := e.do(t, "POST", "/orders", "", bom); !r.replayed() {
		t.Errorf("a body with a byte order mark: %d replayed=%v, want keyed and replayed", r.StatusCode, r.replayed())
	}
	if r := e.do(t, "POST", "/orders", "", `{"id":01}`); r.problemType() != "missing-key" {
		t.Errorf("01: %d %s, want 400 missing-key (not JSON)", r.StatusCode, r.problemType())
	}
}

// With /items/0 ignored, {"items":["x"]} and {"items":[]} are still two
// bodies: the element's value is ignored, not its presence.
func TestIgnoredArrayElementKeepsItsPlace(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.FingerprintIgnore = []jsonread.Pointer{mustPointer(t, "/items/0")} }))
	e.do(t, "POST", "/orders", "k-1", `{"items":["x"]}`)
	if r := e.do(t, "POST", "/orders", "k-1", `{"items":["y"]}`); !r.replayed() {
		t.Errorf("another value at /items/0: %d, want replayed", r.StatusCode)
	}
	if r := e.do(t, "POST", "/orders", "k-1", `{"items":[]}`); r.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("no element at /items/0: %d replayed=%v, want 422", r.StatusCode, r.replayed())
	}
}

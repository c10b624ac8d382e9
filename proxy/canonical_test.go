package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// The fingerprint of a body that is not JSON is its bytes: a client's
// body is never refused for the fingerprint's sake.
func TestFingerprintBodyHashesNonJSONRaw(t *testing.T) {
	ignore := []jsonread.Pointer{mustPointer(t, "/ts")}
	for _, body := range []string{`a=1&b=2`, `{"b":1,`, ``} {
		got, _, _ := fingerprintBody(nil, []byte(body), FingerprintCanonical, ignore)
		if string(got) != body {
			t.Errorf("fingerprintBody(%q) = %q, want the body as sent", body, got)
		}
	}
	body := []byte(`{"b":1, "a":2}`)
	if got, _, _ := fingerprintBody(nil, body, FingerprintRaw, nil); &got[0] != &body[0] {
		t.Error("raw mode copied the body")
	}
	if got, _, _ := fingerprintBody(nil, body, FingerprintRaw, ignore); string(got) != `{"a":2,"b":1}` {
		t.Errorf("fingerprint_ignore without canonical: %s, want the canonical form", got)
	}
	scratch := make([]byte, 0, 64)
	got, grown, _ := fingerprintBody(scratch, body, FingerprintCanonical, nil)
	if string(got) != `{"a":2,"b":1}` || &grown[:1][0] != &scratch[:1][0] {
		t.Errorf("canonical: %s; want it written into the scratch buffer", got)
	}
}

func mustPointer(t testing.TB, s string) jsonread.Pointer {
	t.Helper()
	p, err := jsonread.ParsePointer(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFingerprintJSONText(t *testing.T) {
	for in, want := range map[string]FingerprintJSON{"raw": FingerprintRaw, "canonical": FingerprintCanonical} {
		var f FingerprintJSON
		if err := f.UnmarshalText([]byte(in)); err != nil || f != want || f.String() != in {
			t.Errorf("%q: %v, %v", in, f, err)
		}
	}
	var f FingerprintJSON
	if err := f.UnmarshalText([]byte("sorted")); err == nil || err.Error() != `must be one of raw, canonical; got "sorted"` {
		t.Errorf("sorted: %v", err)
	}
}

func TestCheckFingerprintIgnore(t *testing.T) {
	if err := checkFingerprintIgnore([]jsonread.Pointer{mustPointer(t, "/ts"), mustPointer(t, "/a/0")}); err != nil {
		t.Error(err)
	}
	if err := checkFingerprintIgnore([]jsonread.Pointer{mustPointer(t, "")}); err == nil || !strings.Contains(err.Error(), "whole body") {
		t.Errorf("empty pointer: %v", err)
	}
	most := make([]jsonread.Pointer, maxFingerprintIgnore)
	for i := range most {
		most[i] = mustPointer(t, "/p"+strconv.Itoa(i))
	}
	if err := checkFingerprintIgnore(most); err != nil {
		t.Errorf("the most pointers allowed, %d: %v", len(most), err)
	}
	if err := checkFingerprintIgnore(make([]jsonread.Pointer, maxFingerprintIgnore+1)); err == nil {
		t.Error("too many pointers accepted")
	}
}

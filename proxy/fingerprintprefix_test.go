package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"testing"
)

// fingerprintInput is the input fingerprint hashes for a request without
// trailers, written out from its documented form: every part
// length-prefixed (8 bytes, big-endian).
func fingerprintInput(at readAs, host, query string, headers map[string][]string, names []string, body []byte) []byte {
	var b []byte
	field := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(at.method)
	field(host)
	field(at.path)
	field(query)
	for _, name := range names {
		field(name)
		b = binary.BigEndian.AppendUint64(b, uint64(len(headers[name])))
		for _, v := range headers[name] {
			field(v)
		}
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	return append(b, body...)
}

// TestFingerprintFromAKeptStateIsTheSHA256OfTheRequest holds the kept
// first-block states to what they save: the digest is the SHA-256 of the
// whole input whether the first block's state was kept, just kept, or a
// state kept for another block sits in the slot.
func TestFingerprintFromAKeptStateIsTheSHA256OfTheRequest(t *testing.T) {
	body := []byte(`{"amount":2000,"currency":"eur"}`)
	headers := []string{"Content-Type"}
	at := readAs{method: http.MethodPost, path: "/v1/charges/with/a/long/enough/path"}
	const host, query = "api.example", "expand=customer"
	r := httptest.NewRequest(http.MethodPost, "http://api.example/v1/charges?"+query, nil)
	r.Header.Set("Content-Type", "application/json")
	in := fingerprintInput(at, host, query, r.Header, headers, body)
	if len(in) < 2*sha256.BlockSize {
		t.Fatalf("the input is %d bytes: too short to have a first block of its own", len(in))
	}
	want := sha256.Sum256(in)

	other := fingerprintInput(readAs{http.MethodPut, at.path}, host, query, r.Header, headers, body)
	otherSum := sha256.Sum256(other)

	clearPrefixStates(t)
	for _, step := range []string{"no state kept", "its state kept"} {
		if got := fingerprint(r, at, host, body, headers); got != want {
			t.Fatalf("%s: fingerprint = %x, want %x", step, got, want)
		}
	}

	// Every slot holds another block's state: none may be used.
	var wrong hasher
	wrong.h = sha256.New()
	wrong.h.Write(other[:sha256.BlockSize])
	state, err := wrong.h.(binaryState).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range prefixStates {
		prefixStates[i].Store(&prefixState{block: [sha256.BlockSize]byte(other), state: state})
	}
	if got := fingerprint(r, at, host, body, headers); got != want {
		t.Fatalf("with another block's state in every slot: fingerprint = %x, want %x", got, want)
	}
	if got := fingerprint(r, readAs{http.MethodPut, at.path}, host, body, headers); got != otherSum {
		t.Fatalf("the other request: fingerprint = %x, want %x", got, otherSum)
	}
}

func clearPrefixStates(t *testing.T) {
	t.Helper()
	clear := func() {
		for i := range prefixStates {
			prefixStates[i].Store(nil)
		}
	}
	clear()
	t.Cleanup(clear)
}

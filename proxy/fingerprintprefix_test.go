package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/maphash"
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
	if host != "" {
		field(host)
	}
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

// TestFingerprintKeepsNoStateOfAQueryOrHeaderValue holds the kept states
// to blocks of methods, hosts, paths and header names: a first block that
// reaches into the query, a header value or the body is neither kept nor
// looked up, one that ends where the first of them starts is kept, and the
// fingerprint is the SHA-256 all the same.
func TestFingerprintKeepsNoStateOfAQueryOrHeaderValue(t *testing.T) {
	long := readAs{method: http.MethodPost, path: "/v1/charges/with/a/long/enough/path"}
	short := readAs{method: http.MethodPost, path: "/v1/c"}
	// The first block of "POST", "a.example" and a path of 11 bytes, each
	// with its 8-byte length, ends where the query's length ends.
	charges := readAs{method: http.MethodPost, path: "/v1/charges"}
	for _, c := range []struct {
		name    string
		at      readAs
		query   string
		headers []string // fingerprint_headers
		set     string   // the one of them sent, with a secret value
		host    string
		kept    bool
	}{
		{"the query after the first block", long, "token=s3cr3t", []string{"Content-Type"}, "Content-Type", "a.example", true},
		{"a query in the first block", short, "token=s3cr3t", []string{"Content-Type"}, "Content-Type", "a.example", false},
		{"a header value in the first block", short, "", []string{"X"}, "X", "", false},
		{"an input of exactly one block", charges, "", nil, "", "a.example", true},
		{"the query from the second block on", readAs{http.MethodPost, "/v1/charges/abcdefg"}, "token=s3cr3t", nil, "", "a.example", true},
		{"the query from the first block's last byte on", readAs{http.MethodPost, "/v1/charges/abcdef"}, "token=s3cr3t", nil, "", "a.example", false},
		{"a header value from the second block on", charges, "", []string{"X"}, "X", "", true},
		{"a header value from the first block's last byte on", readAs{http.MethodPost, "/v1/charge"}, "", []string{"X"}, "X", "", false},
		{"fingerprint headers not sent", short, "", []string{"X", "Y"}, "", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearPrefixStates(t)
			target := "http://a.example" + c.at.path
			if c.query != "" {
				target += "?" + c.query
			}
			r := httptest.NewRequest(http.MethodPost, target, nil)
			if c.set != "" {
				r.Header.Set(c.set, "s3cr3t")
			}
			body := []byte(`{"amount":2000,"currency":"eur","description":"long enough to pass a block"}`)
			want := sha256.Sum256(fingerprintInput(c.at, c.host, c.query, r.Header, c.headers, body))
			if got := fingerprint(r, c.at, c.host, body, c.headers); got != want {
				t.Fatalf("fingerprint = %x, want %x", got, want)
			}
			kept := 0
			for i := range prefixStates {
				if p := prefixStates[i].Load(); p != nil {
					kept++
					if bytes.Contains(p.block[:], []byte("s3cr3t")) {
						t.Errorf("kept a block holding a secret: %q", p.block)
					}
				}
			}
			if got, want := kept, map[bool]int{true: 1, false: 0}[c.kept]; got != want {
				t.Errorf("%d states kept, want %d", got, want)
			}
		})
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

// TestOneOffPrefixesRarelyReplaceAKeptState: requests whose first blocks
// are each new (a path parameter within the first 64 bytes) replace a kept
// state about one time in prefixReplaceOdds, so they neither allocate a
// state on every request nor never give way. Either bound is missed by
// chance less than once in 2^80 runs.
func TestOneOffPrefixesRarelyReplaceAKeptState(t *testing.T) {
	clearPrefixStates(t)
	const host = "a.example"
	body := []byte(`{}`)
	held, replaced := 0, 0
	for i := range 1000 {
		at := readAs{method: http.MethodPost, path: fmt.Sprintf("/v1/charges/%06d/refunds", i)}
		r := httptest.NewRequest(http.MethodPost, "http://"+host+at.path, nil)
		block := [sha256.BlockSize]byte(fingerprintInput(at, host, "", r.Header, nil, body))
		slot := &prefixStates[maphash.Bytes(prefixSeed, block[:])%prefixSlots]
		before := slot.Load()
		fingerprint(r, at, host, body, nil)
		if before != nil {
			held++
			if slot.Load() != before {
				replaced++
			}
		}
	}
	if replaced == 0 || replaced*2 > held {
		t.Errorf("%d of %d kept states replaced by a new block, want about one in %d", replaced, held, prefixReplaceOdds)
	}
}

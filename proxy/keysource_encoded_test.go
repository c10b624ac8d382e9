package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// encodedPost renders a JSON POST to /hooks whose body is sent under
// Content-Encoding enc.
func encodedPost(enc string, body []byte) string {
	return "POST /hooks HTTP/1.1\r\nHost: h.example\r\nContent-Type: application/json\r\nContent-Encoding: " + enc +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + string(body)
}

func gzipped(t *testing.T, s string) []byte {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	if _, err := z.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	z.Close()
	return b.Bytes()
}

func deflated(t *testing.T, s string) []byte {
	var b bytes.Buffer
	z := zlib.NewWriter(&b)
	if _, err := z.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	z.Close()
	return b.Bytes()
}

// A JSON body sent gzip- or deflate-encoded is decoded before a json:
// source reads its key, as Express's body-parser decodes it before the
// upstream reads it: a redelivery executes once. The body is forwarded
// and fingerprinted as sent.
func TestJSONKeyIsReadFromAnEncodedBody(t *testing.T) {
	e := newEnv(t, nil, withPolicy(keySources(t, "json:/id")))
	for _, c := range []struct {
		enc  string
		body []byte
	}{
		{"gzip", gzipped(t, `{"id":"evt_1"}`)},
		{"x-gzip", gzipped(t, `{"id":"evt_2"}`)},
		{"deflate", deflated(t, `{"id":"evt_3"}`)},
	} {
		before := e.up.calls.Load()
		for range 2 {
			if r := e.raw(t, encodedPost(c.enc, c.body)); r.StatusCode != http.StatusCreated {
				t.Fatalf("%s: %d %s", c.enc, r.StatusCode, r.body)
			}
		}
		if got := e.up.calls.Load() - before; got != 1 {
			t.Errorf("%s: a redelivery of one event: executions = %d, want 1", c.enc, got)
		}
	}
	if got, _ := io.ReadAll(e.up.last().Body); !bytes.Equal(got, deflated(t, `{"id":"evt_3"}`)) {
		t.Errorf("the upstream got %q, want the body as sent", got)
	}
	// The key API reads it as the request path does.
	r := httptest.NewRequest("POST", "http://h.example/hooks", bytes.NewReader(gzipped(t, `{"id":"evt_1"}`)))
	r.Header.Set("Content-Encoding", "gzip")
	if _, err := e.handler.KeyHashFrom(r, "", ""); err != nil {
		t.Errorf("KeyHashFrom of an encoded body: %v", err)
	}
	// A body repeating the key's name, decoded, is read two ways.
	if r := e.raw(t, encodedPost("gzip", gzipped(t, `{"id":"a","ID":"b"}`))); r.problemType() != "ambiguous-body" {
		t.Errorf("an encoded body repeating a name: %d %q, want ambiguous-body", r.StatusCode, r.problemType())
	}
	// One that does not decode within max_request_body has no key.
	small := newEnv(t, nil, withPolicy(keySources(t, "json:/id")), withPolicy(func(p *Policy) { p.MaxRequestBody = 64; p.RequireKey = true }))
	big := gzipped(t, `{"id":"evt_4","pad":"`+string(bytes.Repeat([]byte("x"), 100))+`"}`)
	if r := small.raw(t, encodedPost("gzip", big)); r.problemType() != "missing-key" {
		t.Errorf("a body decoding past max_request_body: %d %q, want missing-key", r.StatusCode, r.problemType())
	}
}

// A GraphQL request sent gzip-encoded is read decoded, as express-graphql
// reads it: its mutation's @idempotent key protects it.
func TestGraphQLRequestIsReadFromAnEncodedBody(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	body := gzipped(t, gql(`mutation { refundCreate(id: 1) @idempotent(key: "r-1") { id } }`))
	req := "POST /graphql HTTP/1.1\r\nHost: h.example\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + string(body)
	for range 2 {
		if r := e.raw(t, req); r.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", r.StatusCode, r.body)
		}
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Errorf("an encoded mutation keyed by its directive: executions = %d, want 1", got)
	}
}

// A body is decoded up to max_request_body exactly: one that decodes to
// the limit is read whole, one a byte longer not at all.
func TestEncodedBodyIsDecodedUpToMaxRequestBody(t *testing.T) {
	const limit = 64
	exact := strings.Repeat("x", limit)
	r := httptest.NewRequest("POST", "http://h.example/hooks", nil)
	r.Header.Set("Content-Encoding", "gzip")
	if got := inflated(r, gzipped(t, exact), limit); string(got) != exact {
		t.Errorf("a body decoding to max_request_body: %d bytes decoded, want all %d", len(got), limit)
	}
	if got := inflated(r, gzipped(t, exact+"x"), limit); got != nil {
		t.Errorf("a body decoding a byte past max_request_body: %d bytes decoded, want none", len(got))
	}
}

// A lookup's {json:} placeholder is filled from the body as the upstream
// reads it: a plain body's member, and an encoded body's, decoded.
func TestLookupPlaceholderIsFilledFromThePlainOrDecodedBody(t *testing.T) {
	l := &ledger{}
	e := reconcileEnv(t, l, func(p *Policy) { p.Reconcile.Request = "GET /v1/orders/{json:/order_id}" })
	if r := e.do(t, "POST", "/v1/charges", "k1", `{"order_id":"o1"}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("a plain body naming its order: %d %s", r.StatusCode, r.body)
	}
	l.mu.Lock()
	l.die = 1 // its outcome unknown: the lookup goes out
	l.mu.Unlock()
	body := gzipped(t, `{"order_id":"o2"}`)
	raw := "POST /v1/charges HTTP/1.1\r\nHost: h.example\r\nIdempotency-Key: k2\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + string(body)
	if r := e.raw(t, raw); r.StatusCode == http.StatusBadRequest {
		t.Fatalf("an encoded body naming its order: %d %s", r.StatusCode, r.body)
	}
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.probes) == 0 {
			return errors.New("no lookup yet")
		}
		if got := l.probes[0].URL.Path; got != "/v1/orders/o2" {
			t.Fatalf("lookup of %s, want /v1/orders/o2: the decoded body's member", got)
		}
		return nil
	})
}

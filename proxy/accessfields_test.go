package proxy

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// X-Forwarded-For is believed only from a trusted peer, and only as far
// as the hops are trusted: the client is the rightmost address that is
// not a trusted proxy's, so nothing a client writes in front of it counts.
func TestClientAddrBelievesForwardedForOnlyFromTrustedProxies(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, c := range []struct {
		name, peer string
		xff        []string
		trusted    []netip.Prefix
		want       string
	}{
		{"no trusted proxies: the peer, whatever the header says", "203.0.113.9:4000", []string{"1.1.1.1"}, nil, "203.0.113.9"},
		{"an untrusted peer's header is ignored", "203.0.113.9:4000", []string{"1.1.1.1, 10.0.0.2"}, trusted, "203.0.113.9"},
		{"a trusted peer without the header: the peer", "10.0.0.1:4000", nil, trusted, "10.0.0.1"},
		{"one trusted hop", "10.0.0.1:4000", []string{"198.51.100.4"}, trusted, "198.51.100.4"},
		{"a chain of trusted hops, the client's own claim left of it ignored", "10.0.0.1:4000",
			[]string{"6.6.6.6, 198.51.100.4, 10.9.9.9", "10.0.0.7"}, trusted, "198.51.100.4"},
		{"every hop trusted: the leftmost", "10.0.0.1:4000", []string{"10.1.1.1,10.2.2.2"}, trusted, "10.1.1.1"},
		{"an entry that is no address: the last trusted hop", "10.0.0.1:4000", []string{"evil, 10.3.3.3"}, trusted, "10.3.3.3"},
		{"empty entries are skipped", "10.0.0.1:4000", []string{" 198.51.100.4 , ,"}, trusted, "198.51.100.4"},
		{"an empty entry before the first comma is skipped too", "10.0.0.1:4000", []string{",198.51.100.4"}, trusted, "198.51.100.4"},
		{"IPv6 peer and hops", "[fd00::1]:4000", []string{"2001:db8::5, fd00::2"}, trusted, "2001:db8::5"},
		{"an IPv4-mapped peer is its IPv4 address", "[::ffff:10.0.0.1]:4000", []string{"198.51.100.4"}, trusted, "198.51.100.4"},
		{"a peer without a port", "10.0.0.1", []string{"198.51.100.4"}, trusted, "198.51.100.4"},
		{"an unparsable peer is written as it is, its header ignored", "@unix", []string{"198.51.100.4"}, trusted, "@unix"},
	} {
		r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
		if c.xff != nil {
			r.Header["X-Forwarded-For"] = c.xff
		}
		if got := clientAddr(r, c.trusted); got != c.want {
			t.Errorf("%s: client_addr %q, want %q", c.name, got, c.want)
		}
	}
}

// The request id is the client's X-Request-Id, cut to 128 bytes at a
// character's start so the line stays bounded and valid.
func TestRequestIDIsTheClientsBounded(t *testing.T) {
	r := &http.Request{Header: http.Header{}}
	if got := requestID(r); got != "" {
		t.Errorf("without X-Request-Id: %q, want none", got)
	}
	r.Header.Set("X-Request-Id", "f81d4fae-7dec")
	if got := requestID(r); got != "f81d4fae-7dec" {
		t.Errorf("request id %q, want the header's", got)
	}
	// Bytes that are all continuation bytes start no character: nothing of
	// them is kept, and the cut never reads before the value.
	r.Header.Set("X-Request-Id", strings.Repeat("\x80", 2*maxRequestID))
	if got := requestID(r); got != "" {
		t.Errorf("request id of continuation bytes only: %q, want none", got)
	}
	long := "a" + strings.Repeat("日", 100) // 301 bytes; byte 128 is inside a character
	r.Header.Set("X-Request-Id", long)
	if got := requestID(r); len(got) != 127 || !strings.HasPrefix(long, got) {
		t.Errorf("long request id: %d bytes %q, want its first 127 (whole characters)", len(got), got)
	}
}

// The fields chosen are on the line and no others: by default those the
// line always had; with client_addr, user_agent, request_id and
// upstream_seconds chosen, those too, upstream_seconds only on a request
// that went upstream. A change of fields applies to the next line.
func TestAccessLineHasTheChosenFields(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, nil, withLog(&logs), withAccessLog)
	e.do(t, "POST", "/v1/a", "k", "{}", "User-Agent", "curl/8", "X-Request-Id", "r-1")
	def := logs.lines(t, "access")
	if len(def) != 1 {
		t.Fatalf("%d access lines, want 1", len(def))
	}
	for _, f := range DefaultAccessFields() {
		if _, ok := def[0][f.String()]; !ok && f != FieldReconcileProbes {
			t.Errorf("default line has no %s: %v", f, def[0])
		}
	}
	for _, k := range []string{"client_addr", "user_agent", "request_id", "upstream_seconds"} {
		if _, ok := def[0][k]; ok {
			t.Errorf("default line has %s: %v", k, def[0])
		}
	}

	fields := []AccessField{FieldStatus, FieldUpstream, FieldClientAddr, FieldUserAgent, FieldRequestID}
	if err := e.handler.SetAccessLogFormat(fields, nil); err != nil {
		t.Fatal(err)
	}
	e.do(t, "POST", "/v1/b", "k2", "{}", "User-Agent", "curl/8", "X-Request-Id", "r-2")
	e.do(t, "POST", "/v1/b", "k2", "{}", "User-Agent", "curl/8")
	lines := logs.lines(t, "access")[1:]
	if len(lines) != 2 {
		t.Fatalf("%d access lines after the change, want 2", len(lines))
	}
	exec, replay := lines[0], lines[1]
	if exec["client_addr"] != "127.0.0.1" || exec["user_agent"] != "curl/8" || exec["request_id"] != "r-2" || exec["status"] != float64(201) {
		t.Errorf("executed line %v, want client_addr 127.0.0.1, user_agent curl/8, request_id r-2, status 201", exec)
	}
	if up, ok := exec["upstream_seconds"].(float64); !ok || up <= 0 {
		t.Errorf("executed line has upstream_seconds %v, want a positive duration", exec["upstream_seconds"])
	}
	if _, ok := replay["upstream_seconds"]; ok {
		t.Errorf("a replay never went upstream, but its line has upstream_seconds: %v", replay)
	}
	if _, ok := replay["request_id"]; ok {
		t.Errorf("a request without X-Request-Id has a request_id: %v", replay)
	}
	for _, l := range lines {
		for _, k := range []string{"method", "path", "route", "outcome", "duration_seconds", "bytes", "key_hash"} {
			if _, ok := l[k]; ok {
				t.Errorf("line has %s, not chosen: %v", k, l)
			}
		}
	}
}

// A field without a name and a range that is no CIDR are refused, by the
// handler as by the configuration.
func TestAccessLogFormatRefusesWhatItCannotWrite(t *testing.T) {
	if _, err := newAccessFormat([]AccessField{AccessField(len(accessFieldWords))}, nil); err == nil {
		t.Error("a field past the last one was accepted")
	}
	if _, err := newAccessFormat(nil, []netip.Prefix{{}}); err == nil {
		t.Error("the zero prefix was accepted as a trusted range")
	}
	var f AccessField
	if err := f.UnmarshalText([]byte("user_agnet")); err == nil || !strings.Contains(err.Error(), "did you mean user_agent?") {
		t.Errorf("unknown field: %v, want a did-you-mean user_agent", err)
	}
}

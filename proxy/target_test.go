package proxy

import (
	"net/http"
	"testing"
)

func TestNormalPath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		odd      bool
	}{
		{"/v1/charges", "/v1/charges", false},
		{"/v1/%63harges", "/v1/charges", false},
		{"/v1/%7e%2D%5f%2e", "/v1/~-_.", false},
		{"/v1/caf%c3%a9", "/v1/caf%C3%A9", false},
		{"/internal/%2e%2e/v1/charges", "/v1/charges", false},
		{"/internal/%2E%2e/v1/charges", "/v1/charges", false},
		{"/a/./b/../c", "/a/c", false},
		{"/a/b/..", "/a/", true}, // a final dot segment: /a/ to RFC 3986, /a to path.Clean
		{"/a/.", "/a/", true},
		{"/..", "/", false},
		{"/a/../", "/", false},
		{"/a/.well-known/x", "/a/.well-known/x", false},
		{"/a//b", "/a//b", false},  // kept: some upstreams tell it from /a/b
		{"/a//../b", "/a/b", true}, // RFC 3986 says /a/b, a slash-merging server /b
		{"/v1%2Fcharges", "/v1%2Fcharges", true},
		{"/v1%2fcharges", "/v1%2Fcharges", true},
		{"/v1%5Ccharges", "/v1%5Ccharges", true},
		{"/v1/charges;x", "/v1/charges;x", true},
		{"/v1/charges;jsessionid=1/x", "/v1/charges;jsessionid=1/x", true},
		{"*", "*", false},
	} {
		got, odd := normalPath(c.in)
		if got != c.want || odd != c.odd {
			t.Errorf("normalPath(%q) = %q, odd %v; want %q, odd %v", c.in, got, odd, c.want, c.odd)
		}
	}
}

func TestSplitReadingIsWhatDecodingUpstreamsSee(t *testing.T) {
	for in, want := range map[string]string{
		"/v1%2Fcharges":                   "/v1/charges",
		"/v1%5ccharges":                   "/v1/charges",
		"/v1/charges;x":                   "/v1/charges",
		"/v1;a=b/charges;c":               "/v1/charges",
		"/internal/..%2Fv1/charges":       "/v1/charges",
		"/internal%2F..%2F%2e%2e/charges": "/charges",
	} {
		if got := splitReading(in); got != want {
			t.Errorf("splitReading(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadingANormalRequestAllocatesNothing(t *testing.T) {
	r, _ := http.NewRequest("POST", "http://h.example/v1/charges", nil)
	if n := testing.AllocsPerRun(100, func() { _ = readTarget(r) }); n != 0 {
		t.Errorf("readTarget allocates %v times for a plain request", n)
	}
}

func TestMethodOverrideIsReadAndFingerprinted(t *testing.T) {
	r, _ := http.NewRequest("get", "http://h.example/x", nil)
	tg := readTarget(r)
	if tg.method != "GET" || tg.own != "GET" || tg.fpMethod != "get" {
		t.Errorf("no override: method %q own %q fp %q", tg.method, tg.own, tg.fpMethod)
	}
	r.Header.Set("X-HTTP-Method-Override", " patch ")
	tg = readTarget(r)
	if tg.method != "PATCH" || tg.own != "GET" || tg.overrides != overrideNone {
		t.Errorf("override: method %q own %q overrides %v", tg.method, tg.own, tg.overrides)
	}
	if tg.fpMethod == "get" {
		t.Error("the override header is not part of the fingerprint")
	}
	for name, h := range map[string]http.Header{
		"two methods":  {"X-Http-Method-Override": {"PATCH"}, "X-Http-Method": {"DELETE"}},
		"two lines":    {"X-Method-Override": {"PUT", "DELETE"}},
		"a list":       {"X-Http-Method": {"PUT, DELETE"}},
		"not a method": {"X-Http-Method": {"P/T"}},
	} {
		r.Header = h
		if tg := readTarget(r); tg.overrides != overrideConflict {
			t.Errorf("%s: overrides %v, want a conflict", name, tg.overrides)
		}
	}
	r.Header = http.Header{"X-Http-Method-Override": {"PATCH"}, "X-Method-Override": {"patch"}}
	if tg := readTarget(r); tg.overrides != overrideNone || tg.method != "PATCH" {
		t.Errorf("two headers naming one method: overrides %v, method %q", tg.overrides, tg.method)
	}
}

package pathread

import "testing"

func TestNormal(t *testing.T) {
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
		got, odd := Normal(c.in)
		if got != c.want || odd != c.odd {
			t.Errorf("Normal(%q) = %q, odd %v; want %q, odd %v", c.in, got, odd, c.want, c.odd)
		}
	}
}

func TestSplitIsWhatDecodingUpstreamsSee(t *testing.T) {
	for in, want := range map[string]string{
		"/v1%2Fcharges":                   "/v1/charges",
		"/v1%5ccharges":                   "/v1/charges",
		"/v1/charges;x":                   "/v1/charges",
		"/v1;a=b/charges;c":               "/v1/charges",
		"/internal/..%2Fv1/charges":       "/v1/charges",
		"/internal%2F..%2F%2e%2e/charges": "/charges",
	} {
		if got := Split(in); got != want {
			t.Errorf("Split(%q) = %q, want %q", in, got, want)
		}
	}
}

package pathread

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzNormal checks Normal against a decoding upstream's
// (Go's net/http and ServeMux, most frameworks): for a path not flagged
// odd, the upstream reads the normal form as it reads the path as sent, so
// a route matched on the normal form is the upstream's. The normal form is
// a fixed point with no dot segment left.
func FuzzNormal(f *testing.F) {
	for _, s := range []string{
		"/v1/charges", "/v1/%63harges", "/internal/%2e%2e/v1/charges", "/a/./b/../c", "/a//../b",
		"/v1%2Fcharges", "/v1/charges;x", "/%25%32%65", "/a/%2E./b", "/..%2e/x", "/caf%C3%A9/", "/a\\b",
		"/v1/charges%20", "/v1/charges%3Bx", "/v1/my%20charges/", "/v1/charges.json", "/v1/charges//",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !strings.HasPrefix(p, "/") {
			return
		}
		if _, err := url.PathUnescape(p); err != nil {
			return // net/http refuses it before the proxy sees it
		}
		norm, odd := Normal(p)
		if base, ok := WithoutFormatSuffix(norm); ok && (!strings.HasPrefix(norm, base) || strings.Contains(norm[len(base):], "/")) {
			t.Fatalf("WithoutFormatSuffix(%q) = %q: not the path without its last segment's suffix", norm, base)
		}
		if hasDotSegment(norm) {
			t.Fatalf("Normal(%q) = %q keeps a dot segment", p, norm)
		}
		if again, _ := Normal(norm); again != norm {
			t.Fatalf("Normal(%q) = %q, but normalPath of that is %q", p, norm, again)
		}
		if odd {
			return
		}
		// What the proxy does not flag, the splitting upstreams read as
		// the proxy does.
		if split := Split(p); split != norm {
			t.Fatalf("Split(%q) = %q, its normal form %q, and it is not flagged odd", p, split, norm)
		}
		sent, _ := url.PathUnescape(p)
		read, err := url.PathUnescape(norm)
		if err != nil {
			t.Fatalf("Normal(%q) = %q, which does not unescape: %v", p, norm, err)
		}
		if a, b := Clean(sent), Clean(read); a != b {
			t.Fatalf("a decoding upstream reads %q as %q, its normal form %q as %q", p, a, norm, b)
		}
	})
}

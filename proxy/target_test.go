package proxy

import (
	"net/http"
	"testing"
)

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
	// What the fingerprint hashes is pinned: a key recorded before an
	// upgrade is replayed after it, not refused as another payload.
	if want := "get\nX-Http-Method-Override: patch "; tg.fpMethod != want {
		t.Errorf("the fingerprint hashes %q for the method, want %q", tg.fpMethod, want)
	}
	r.Header = http.Header{"X-Method-Override": {"PUT", "put"}}
	if tg, want := readTarget(r), "get\nX-Method-Override:PUT\nput"; tg.fpMethod != want || tg.overrides != overrideNone {
		t.Errorf("two lines naming one method: the fingerprint hashes %q, overrides %v; want %q, none", tg.fpMethod, tg.overrides, want)
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
	// Spellings of one header are hashed in one fixed order, whatever the
	// order they came in: the name as written first.
	r.Header = http.Header{"X_http_method_override": {"PATCH"}, "X-Http_method-Override": {"PATCH"}, "X-Http-Method-Override": {"PATCH"}}
	if tg, want := readTarget(r), "get\nX-Http-Method-Override:PATCH\nX-Http_method-Override:PATCH\nX_http_method_override:PATCH"; tg.fpMethod != want {
		t.Errorf("three spellings of one header: the fingerprint hashes %q, want %q", tg.fpMethod, want)
	}
}

// Methods compare upper-cased and path_case: insensitive paths
// lower-cased in every ASCII letter, the first and last of the alphabet
// too, and in nothing else: the bytes beside the letters ('@', '[', '`',
// '{') and percent-escapes keep their case.
func TestASCIICaseFoldingCoversEveryLetterAndNothingElse(t *testing.T) {
	for _, tc := range []struct{ in, upper, lower string }{
		{"a", "A", "a"},
		{"z", "Z", "z"},
		{"A", "A", "a"},
		{"Z", "Z", "z"},
		{"@[`{", "@[`{", "@[`{"},
		{"/x/%2F", "/X/%2F", "/x/%2f"},
	} {
		if got := upperASCII(tc.in); got != tc.upper {
			t.Errorf("upperASCII(%q) = %q, want %q", tc.in, got, tc.upper)
		}
		if got := lowerASCII(tc.in); got != tc.lower {
			t.Errorf("lowerASCII(%q) = %q, want %q", tc.in, got, tc.lower)
		}
	}
}

package proxy

import (
	"reflect"
	"testing"
)

// Requests are matched with their method upper-cased, so a route whose
// pattern names its method in another case matches nothing: its policy
// would never apply. It is refused, with the spelling that matches.
func TestRouteMethodInAnotherCaseIsRefusedNeverADeadRoute(t *testing.T) {
	got := CheckPatterns([]string{"post /a", "Post /b", "POST /c", "PROPFIND /d", "/e"})
	want := []PatternProblem{
		{0, `method "post" of "post /a" matches no request: requests are matched with their method upper-cased; write "POST /a"`},
		{1, `method "Post" of "Post /b" matches no request: requests are matched with their method upper-cased; write "POST /b"`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckPatterns =\n%v\nwant\n%v", got, want)
	}

	if _, err := New(Options{Upstream: newUpstream(t, nil).url(t), Store: newFlaky(t), Default: DefaultPolicy(),
		Routes: []Route{{Pattern: "post /a", Policy: DefaultPolicy()}}}); err == nil {
		t.Error(`New accepted the route "post /a"`)
	}
}

// A route whose pattern names a method its methods do not protect would
// pass every request it matches through: New refuses it unless it is
// disabled. (The configuration refuses it first, naming the route's key.)
func TestRouteProtectingNoneOfItsRequestsIsRefusedUnlessDisabled(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		methods []string
		want    string
	}{
		{"POST /a", []string{"PUT", "PATCH"}, "POST"},
		{"POST /a", nil, "POST"},
		{"HEAD /a", []string{"POST"}, "HEAD"},
		{"POST /a", []string{"post"}, ""},
		{"GET /a", []string{"HEAD"}, ""},
		{"HEAD /a", []string{"GET"}, ""},
		{"/a", []string{"PUT"}, ""},
	} {
		if got := UnprotectedMethod(tc.pattern, tc.methods); got != tc.want {
			t.Errorf("UnprotectedMethod(%q, %q) = %q, want %q", tc.pattern, tc.methods, got, tc.want)
		}
	}
	p := DefaultPolicy()
	p.Methods = []string{"PUT", "PATCH"}
	p.RequireKey = true
	for _, disabled := range []bool{false, true} {
		_, err := New(Options{Upstream: newUpstream(t, nil).url(t), Store: newFlaky(t), Default: DefaultPolicy(),
			Routes: []Route{{Pattern: "POST /v1/charges", Disabled: disabled, Policy: p}}})
		if got := err != nil; got != !disabled {
			t.Errorf("disabled %v: New returned %v", disabled, err)
		}
	}
}

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

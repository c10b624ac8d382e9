package proxy

import (
	"encoding"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// The policy words parse back to themselves, and anything else is refused
// with the list of words, which the configuration shows after the key path.
func TestPolicyWordsRoundTrip(t *testing.T) {
	type text interface {
		encoding.TextMarshaler
		encoding.TextUnmarshaler
	}
	tests := []struct {
		words []string
		value func() text
	}{
		{[]string{"reject", "wait"}, func() text { return new(Concurrency) }},
		{[]string{"fail_closed", "fail_open"}, func() text { return new(OnStoreError) }},
		{[]string{"release", "keep", "reconcile"}, func() text { return new(OnUpstreamError) }},
		{[]string{"keep", "release"}, func() text { return new(ReconcileThen) }},
		{[]string{"reject", "allow"}, func() text { return new(AmbiguousPaths) }},
		{[]string{"forget", "reject"}, func() text { return new(ExpiredKeys) }},
		{[]string{"sensitive", "insensitive"}, func() text { return new(PathCase) }},
		{[]string{"raw", "canonical"}, func() text { return new(FingerprintJSON) }},
		{[]string{"enforce", "shadow"}, func() text { return new(Mode) }},
	}
	for _, tt := range tests {
		for _, w := range tt.words {
			v := tt.value()
			if err := v.UnmarshalText([]byte(w)); err != nil {
				t.Fatalf("UnmarshalText(%q): %v", w, err)
			}
			if got, _ := v.MarshalText(); string(got) != w {
				t.Errorf("%q reads back as %q", w, got)
			}
		}
		err := tt.value().UnmarshalText([]byte("Sometimes"))
		if want := "must be one of " + strings.Join(tt.words, ", ") + `; got "Sometimes"`; err == nil || err.Error() != want {
			t.Errorf("UnmarshalText(Sometimes) = %v, want %q", err, want)
		}
	}
	if !bool(FailOpen) || bool(FailClosed) || UpstreamErrorRelease != 0 || ThenKeep != 0 || ConcurrentReject != 0 || ModeEnforce != 0 {
		t.Error("the zero value of a policy word must be the safe default")
	}
}

func TestDefaultPolicyIsValid(t *testing.T) {
	if problems := DefaultPolicy().Check(nil); len(problems) != 0 {
		t.Errorf("DefaultPolicy().Check() = %v", problems)
	}
}

// Check names configuration keys, so the configuration can put its key
// paths in front of them.
func TestCheckNamesConfigurationKeys(t *testing.T) {
	p := Policy{
		Header:               "Idempotency Key",
		Methods:              []string{"P/T"},
		TTL:                  0,
		LockTTL:              -1,
		Concurrent:           7,
		WaitTimeout:          -1,
		ReleaseStatuses:      []int{99},
		ReleaseGRPCStatuses:  []grpcwire.Code{grpcwire.Unavailable, grpcwire.OK},
		MaxRequestBody:       0,
		MaxResponseBody:      -1,
		ScopeHeaders:         []ScopeHeader{{Cookie: "a b"}, {Header: "a b"}},
		FingerprintHeaders:   []string{"a b"},
		ReplayExcludeHeaders: []string{"a b"},
		Mode:                 9,
		ChurnWindow:          -1,
		ChurnMaxEntries:      1,
	}
	keys := map[string]bool{}
	typ := reflect.TypeFor[Policy]()
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("config"), ",")
		keys[key] = true
	}
	problems := p.Check(nil)
	if len(problems) != 16 {
		t.Errorf("%d problems, want 16: %v", len(problems), problems)
	}
	for _, pr := range problems {
		for _, k := range pr.Keys {
			if !keys[k] {
				t.Errorf("%v names %q, which is no configuration key", pr, k)
			}
		}
		if base, _, _ := strings.Cut(pr.Key, "["); base != pr.Keys[0] {
			t.Errorf("%v: Keys[0] = %q, want its own key", pr, pr.Keys[0])
		}
	}
}

func TestCheckSaysWhereAValueCameFrom(t *testing.T) {
	p := DefaultPolicy()
	p.TTL = p.LockTTL / 2
	from := func(key string) string {
		if key == "lock_ttl" {
			return "from defaults"
		}
		return ""
	}
	got := p.Check(from)
	if len(got) != 1 || got[0].Error() != "lock_ttl: 30s (from defaults) exceeds ttl 15s: lower lock_ttl or raise ttl" {
		t.Errorf("Check = %v", got)
	}
}

// The policy's values are refused exactly past the edges
// docs/configuration.md gives them, and a value at fault is reported once,
// under its own key, not again under the keys compared with it.
func TestPolicyIsCheckedAtTheEdgesOfItsRanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(p *Policy)
		want []string // the problems' keys
	}{
		{"ttl of zero is its own problem only", func(p *Policy) { p.TTL = 0 }, []string{"ttl"}},
		{"lock_ttl as long as ttl", func(p *Policy) { p.LockTTL = p.TTL }, nil},
		{"lock_ttl past ttl", func(p *Policy) { p.LockTTL = p.TTL + time.Nanosecond }, []string{"lock_ttl"}},
		{"wait_timeout of zero under concurrent: reject", func(p *Policy) { p.WaitTimeout = 0 }, nil},
		{"wait_timeout below zero", func(p *Policy) { p.WaitTimeout = -time.Nanosecond }, []string{"wait_timeout"}},
		{"release statuses 100 and 599", func(p *Policy) { p.ReleaseStatuses = []int{100, 599} }, nil},
		{"release status 99", func(p *Policy) { p.ReleaseStatuses = []int{99} }, []string{"release_statuses[0]"}},
		{"release status 600", func(p *Policy) { p.ReleaseStatuses = []int{503, 600} }, []string{"release_statuses[1]"}},
		{"release gRPC status 16, the last code", func(p *Policy) {
			p.ReleaseGRPCStatuses = []grpcwire.Code{grpcwire.Unauthenticated}
		}, nil},
		{"release gRPC status 17", func(p *Policy) {
			p.ReleaseGRPCStatuses = []grpcwire.Code{grpcwire.Unauthenticated + 1}
		}, []string{"release_grpc_statuses[0]"}},
		{"max_request_body of a byte", func(p *Policy) { p.MaxRequestBody = 1 }, nil},
		{"max_request_body of zero", func(p *Policy) { p.MaxRequestBody = 0 }, []string{"max_request_body"}},
		{"max_response_body of zero", func(p *Policy) { p.MaxResponseBody = 0 }, nil},
		{"max_response_body below zero", func(p *Policy) { p.MaxResponseBody = -1 }, []string{"max_response_body"}},
		{"fingerprint_ignore of the most pointers", func(p *Policy) { p.FingerprintIgnore = ignorePointers(t, maxFingerprintIgnore) }, nil},
		{"fingerprint_ignore of one pointer more", func(p *Policy) {
			p.FingerprintIgnore = ignorePointers(t, maxFingerprintIgnore+1)
		}, []string{"fingerprint_ignore"}},
		{"expired_key_window of a nanosecond under reject", func(p *Policy) {
			p.ExpiredKeys, p.ExpiredKeyWindow = ExpiredReject, time.Nanosecond
		}, nil},
		{"expired_key_window of zero under reject", func(p *Policy) {
			p.ExpiredKeys, p.ExpiredKeyWindow = ExpiredReject, 0
		}, []string{"expired_key_window"}},
		{"churn_window of zero", func(p *Policy) { p.ChurnWindow, p.ChurnMaxEntries = 0, 0 }, nil},
		{"churn_window below zero", func(p *Policy) { p.ChurnWindow = -time.Nanosecond }, []string{"churn_window"}},
		{"churn_max_entries of 2", func(p *Policy) { p.ChurnMaxEntries = 2 }, nil},
		{"churn_max_entries of 1", func(p *Policy) { p.ChurnMaxEntries = 1 }, []string{"churn_max_entries"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			tc.set(&p)
			var got []string
			for _, pr := range p.Check(nil) {
				got = append(got, pr.Key)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems at %q, want %q: %v", got, tc.want, p.Check(nil))
			}
		})
	}
}

// ignorePointers returns n distinct fingerprint_ignore pointers.
func ignorePointers(t *testing.T, n int) []jsonread.Pointer {
	t.Helper()
	ptrs := make([]jsonread.Pointer, n)
	for i := range ptrs {
		p, err := jsonread.ParsePointer(fmt.Sprintf("/f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ptrs[i] = p
	}
	return ptrs
}

func TestCheckPatterns(t *testing.T) {
	got := CheckPatterns([]string{"/a/{x}", "/a/{y}", "", "/b/", "/b/", "/c/{x"})
	want := []PatternProblem{
		{1, `pattern "/a/{y}" conflicts with routes[0] "/a/{x}": /a/{y} matches the same requests as /a/{x}`},
		{2, `required (a ServeMux pattern such as "POST /v1/charges" or "/v1/")`},
		{4, "duplicate of routes[3]"},
		{5, `invalid pattern "/c/{x": at offset 3: bad wildcard segment (must end with '}')`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckPatterns =\n%v\nwant\n%v", got, want)
	}
}

// A pair of case-insensitive routes that differ only in case is reported
// once, on the first of them; an insensitive route against a sensitive one
// is reported on the insensitive route, wherever it stands.
func TestCheckPatternCaseReportsEachPairOnce(t *testing.T) {
	got := CheckPatternCase(
		[]string{"/V1/charges", "/a/", "/v1/charges", "/B/", "/b/"},
		[]bool{true, false, true, false, true})
	want := []PatternProblem{
		{0, `pattern "/V1/charges" is routes[2] "/v1/charges" but for case, which path_case insensitive cannot tell apart`},
		{4, `pattern "/b/" is routes[3] "/B/" but for case, which path_case insensitive cannot tell apart`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckPatternCase =\n%v\nwant\n%v", got, want)
	}
}

// New refuses what the configuration refuses: the two share these checks.
func TestNewRefusesInvalidRoutes(t *testing.T) {
	st := newFlaky(t)
	up := newUpstream(t, nil)
	bad := DefaultPolicy()
	bad.ScopeHeaders = []ScopeHeader{{Cookie: "a b"}}
	insensitive := DefaultPolicy()
	insensitive.PathCase = PathCaseInsensitive
	for name, routes := range map[string][]Route{
		"duplicate pattern":   {{Pattern: "/a/", Policy: DefaultPolicy()}, {Pattern: "/a/", Policy: DefaultPolicy()}},
		"conflicting pattern": {{Pattern: "/a/{x}", Policy: DefaultPolicy()}, {Pattern: "/a/{y}", Policy: DefaultPolicy()}},
		"invalid cookie name": {{Pattern: "/a/", Policy: bad}},
		"patterns one but for case under path_case insensitive": {
			{Pattern: "/V1/charges", Policy: insensitive}, {Pattern: "/v1/charges", Policy: insensitive},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(Options{Upstream: up.url(t), Store: st, Routes: routes}); err == nil {
				t.Fatal("New accepted the routes")
			}
		})
	}
}

// Every duration of the built-in policy is the default
// docs/configuration.md gives its key: the table is what a route gets
// when it sets nothing.
func TestDefaultPolicyDurationsAreTheDocumentedDefaults(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // key → its default, as the table writes it
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	checked := 0
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("config"), ",")
			switch {
			case key == "":
			case f.Type == reflect.TypeFor[time.Duration]():
				want, err := time.ParseDuration(documented[prefix+key])
				if err != nil {
					t.Errorf("%s: documented default %q: %v", prefix+key, documented[prefix+key], err)
					continue
				}
				if got := time.Duration(v.Field(i).Int()); got != want {
					t.Errorf("%s: DefaultPolicy has %v, docs/configuration.md %v", prefix+key, got, want)
				}
				checked++
			case f.Type.Kind() == reflect.Struct:
				walk(prefix+key+".", v.Field(i))
			}
		}
	}
	walk("", reflect.ValueOf(DefaultPolicy()))
	if checked < 8 {
		t.Errorf("%d durations checked, want every one of the policy's (8 or more)", checked)
	}
}

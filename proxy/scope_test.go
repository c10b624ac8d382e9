package proxy

import "testing"

// The configuration's scope_headers forms, each read back as it is shown.
func TestScopeHeaderForms(t *testing.T) {
	for _, tc := range []struct {
		in, shown string
		want      ScopeHeader
	}{
		{"authorization", "Authorization", ScopeHeader{Header: "Authorization"}},
		{" X-Tenant ", "X-Tenant", ScopeHeader{Header: "X-Tenant"}},
		{"Cookie:sid", "Cookie:sid", ScopeHeader{Cookie: "sid"}},
		{"cookie: Session", "Cookie:Session", ScopeHeader{Cookie: "Session"}},
		{"COOKIE:sid", "Cookie:sid", ScopeHeader{Cookie: "sid"}},
		{"Cookie", "Cookie", ScopeHeader{Header: "Cookie"}},
	} {
		var got ScopeHeader
		if err := got.UnmarshalText([]byte(tc.in)); err != nil || got != tc.want {
			t.Errorf("UnmarshalText(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if b, _ := got.MarshalText(); string(b) != tc.shown {
			t.Errorf("MarshalText(%+v) = %q, want %q", got, b, tc.shown)
		}
		if err := got.check(); err != nil {
			t.Errorf("a parsed %q fails its check: %v", tc.in, err)
		}
	}
	for in, want := range map[string]string{
		"Cookie:bad name": `invalid cookie name "bad name" in "Cookie:bad name"`,
		"Cookie:":         `invalid cookie name "" in "Cookie:"`,
		"X-Tenant:id":     `invalid header name "X-Tenant:id" (or Cookie:NAME for one cookie)`,
		"":                `invalid header name "" (or Cookie:NAME for one cookie)`,
	} {
		var s ScopeHeader
		if err := s.UnmarshalText([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("UnmarshalText(%q) = %v, want %q", in, err, want)
		}
	}
	for _, bad := range []ScopeHeader{{}, {Header: "a b"}, {Cookie: "a b"}, {Header: "X", Cookie: "sid"}} {
		if err := bad.check(); err == nil {
			t.Errorf("check(%+v) = nil, want a problem", bad)
		}
	}
}

// A scope built in code with a header name as written scopes by that
// header: the route reads it canonically, as a parsed entry is.
func TestScopeHeaderBuiltInCodeScopesByItsHeader(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.ScopeHeaders = []ScopeHeader{{Header: "x-tenant"}} }))
	a := e.do(t, "POST", "/x", "shared", "{}", "X-Tenant", "a")
	b := e.do(t, "POST", "/x", "shared", "{}", "X-Tenant", "b")
	if b.replayed() || a.body == b.body {
		t.Fatalf("tenant b was replayed tenant a's response %q", a.body)
	}
}

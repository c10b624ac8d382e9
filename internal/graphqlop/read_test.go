package graphqlop

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestReadBody(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		kind                    Kind
		key                     string // "" for none
		batch                   bool
	}{
		{"query", "application/json", `{"query":"{ orders { id } }"}`, Query, "", false},
		{"named query", "application/json", `{"query":"query Q { a }","operationName":"Q"}`, Query, "", false},
		{"subscription", "application/json", `{"query":"subscription { paid { id } }"}`, Subscription, "", false},
		{"mutation without key", "application/json", `{"query":"mutation { refund(id: 1) { id } }"}`, Mutation, "", false},
		{"Shopify's form: the directive on the top-level field", "application/json",
			`{"query":"mutation { refundCreate(input: {}) @idempotent(key: \"4f5b\") { refund { id } } }"}`, Mutation, "4f5b", false},
		{"the directive on the operation", "application/json",
			`{"query":"mutation M @idempotent(key: \"k1\") { a }"}`, Mutation, "k1", false},
		{"the key in a variable", "application/json",
			`{"query":"mutation M($k: String!) { a @idempotent(key: $k) }","variables":{"k":"from-var"}}`, Mutation, "from-var", false},
		{"the key in a variable's default", "application/json",
			`{"query":"mutation M($k: String = \"dflt\") { a @idempotent(key: $k) }","variables":null}`, Mutation, "dflt", false},
		{"the directive through a fragment spread", "application/json",
			`{"query":"mutation { ...F } fragment F on Mutation { a @idempotent(key: \"fk\") }"}`, Mutation, "fk", false},
		{"the directive through an inline fragment", "application/json",
			`{"query":"mutation { ... on Mutation { a @idempotent(key: \"ik\") } }"}`, Mutation, "ik", false},
		{"one key twice", "application/json",
			`{"query":"mutation { a @idempotent(key: \"x\") b @idempotent(key: \"x\") }"}`, Mutation, "x", false},
		{"a nested directive is not the key", "application/json",
			`{"query":"mutation { a { b @idempotent(key: \"deep\") } }"}`, Mutation, "", false},
		{"application/graphql", "application/graphql", `mutation { a @idempotent(key: "raw") }`, Mutation, "raw", false},
		{"application/graphql with parameters", "application/graphql; charset=utf-8", `{ a }`, Query, "", false},
		{"a batch of queries", "application/json", `[{"query":"{ a }"},{"query":"query { b }"}]`, Query, "", true},
		{"several queries", "application/json", `{"query":"query A { a } query B { b }","operationName":"B"}`, Query, "", false},
		{"no operation", "application/json", `{"query":"fragment F on Q { a }"}`, None, "", false},
		{"a byte order mark", "application/json", "\xef\xbb\xbf {\"query\":\"mutation { a }\"}", Mutation, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ReadBody(tt.contentType, []byte(tt.body))
			if err != nil {
				t.Fatalf("ReadBody: %v", err)
			}
			if got, want := r.Kind, tt.kind; got != want {
				t.Errorf("kind = %v, want %v", got, want)
			}
			if got, want := r.Key, tt.key; got != want || r.HasKey != (want != "") {
				t.Errorf("key = %q (%v), want %q", got, r.HasKey, want)
			}
			if r.Batch != tt.batch {
				t.Errorf("batch = %v, want %v", r.Batch, tt.batch)
			}
		})
	}
}

func TestAmbiguousRequestsAreRefused(t *testing.T) {
	tests := []struct{ name, body, reason string }{
		{"a document of several operations holding a mutation", `{"query":"query A { a } mutation B { b }","operationName":"A"}`, "2 operations"},
		{"a batch holding a mutation", `[{"query":"{ a }"},{"query":"mutation { b }"}]`, "batch holds a mutation (element 1)"},
		{"an operationName naming no operation", `{"query":"mutation M { a }","operationName":"N"}`, `"N" names no operation`},
		{"an operationName with an anonymous operation", `{"query":"{ a }","operationName":"Q"}`, `"Q" names no operation`},
		{"two operations of one name", `{"query":"query M { a } mutation M { b }","operationName":"M"}`, `two operations are named "M"`},
		{"two different directive keys", `{"query":"mutation { a @idempotent(key: \"x\") b @idempotent(key: \"y\") }"}`, "two @idempotent keys"},
		{"a repeated member name", `{"query":"{ a }","QUERY":"mutation { b }"}`, "repeats in an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadBody("application/json", []byte(tt.body))
			if !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("err = %v, want ErrAmbiguous", err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("reason %q does not say %q", err, tt.reason)
			}
		})
	}
}

func TestUnreadableDirectiveKeysAreInvalid(t *testing.T) {
	for _, body := range []string{
		`{"query":"mutation { a @idempotent }"}`,
		`{"query":"mutation { a @idempotent(key: 5) }"}`,
		`{"query":"mutation($k: String) { a @idempotent(key: $k) }"}`,
		`{"query":"mutation($k: String) { a @idempotent(key: $k) }","variables":{"k":7}}`,
		`{"query":"mutation($k: String) { a @idempotent(key: $k) }","variables":{"other":"x"}}`,
	} {
		if _, err := ReadBody("application/json", []byte(body)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: err = %v, want ErrInvalidKey", body, err)
		}
	}
}

func TestWhatIsNotAGraphQLRequestIsSaidSo(t *testing.T) {
	for _, body := range []string{
		``, `not json`, `"mutation { a }"`, `{}`, `{"query":null}`, `{"query":7}`,
		`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":7}}}`,
		`{"query":"mutation {"}`,
		`[{"query":"{ a }"}, 3]`,
	} {
		if _, err := ReadBody("application/json", []byte(body)); err != ErrNotGraphQL {
			t.Errorf("%q: err = %v, want ErrNotGraphQL", body, err)
		}
	}
}

// Variables sent as a JSON string are the object it holds, as
// express-graphql and graphql-go/handler parse them; variables or an
// operationName of another type are none, as those servers run them.
func TestVariablesAndOperationNameAreReadAsServersRunThem(t *testing.T) {
	for _, tc := range []struct {
		body, vars string
		kind       Kind
	}{
		{`{"query":"mutation { a }","variables":"{\"k\": 1}"}`, `{"k": 1}`, Mutation},
		{`{"query":"mutation { a }","variables":" {}"}`, ` {}`, Mutation},
		{`{"query":"mutation { a }","variables":"x"}`, "", Mutation},
		{`{"query":"mutation { a }","variables":"[1]"}`, "", Mutation},
		{`{"query":"mutation { a }","variables":"{bad"}`, "", Mutation},
		{`{"query":"mutation { a }","variables":5}`, "", Mutation},
		{`{"query":"mutation { a }","variables":[{"k":1}]}`, "", Mutation},
		{`{"query":"mutation { a }","operationName":3}`, "", Mutation},
		{`{"query":"{ a }","operationName":["a"]}`, "", Query},
	} {
		r, err := ReadBody("application/json", []byte(tc.body))
		if err != nil || r.Kind != tc.kind || string(r.Variables) != tc.vars || r.OperationName != "" {
			t.Errorf("%s: %v, variables %q, name %q, %v; want %v, variables %q", tc.body, r.Kind, r.Variables, r.OperationName, err, tc.kind, tc.vars)
		}
	}
	body := `{"query":"mutation { a }","variables":"{\"k\":1,\"k\":2}"}`
	if _, err := ReadBody("application/json", []byte(body)); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("%s: err = %v, want ErrAmbiguous", body, err)
	}
}

func TestMutationInQuery(t *testing.T) {
	tests := []struct {
		raw  string
		want bool
	}{
		{"query=%7B+a+%7D", false},
		{"query=mutation+%7B+a+%7D", true},
		{"query=%7B+a+%7D&query=mutation+%7B+b+%7D", true},
		{"query=query+A+%7B+a+%7D+mutation+B+%7B+b+%7D&operationName=A", true},
		{"x=1", false},
		// A document this parser cannot read may be one another reads.
		{"query=mutation+%7B", true},
		{"query=%7B+mutationLog+", false},
		{"query=" + url.QueryEscape("mutation { "+strings.Repeat("... { ", 1000)+"a"+strings.Repeat(" }", 1001)), true},
		{"%71uery=mutation+%7B+a+%7D", true},
		// Pairs url.ParseQuery drops, and URLSearchParams or Rack keep.
		{"query=mutation+%7B+a+%7D%23;", true},
		{"query=mutation+%7B+a+%7D%23%zz", true},
		{"x=1;query=mutation+%7B+a+%7D", true},
		{"query=%7B+a+%7D%23;", false},
	}
	for _, tt := range tests {
		if got := MutationInQuery(tt.raw); got != tt.want {
			t.Errorf("MutationInQuery(%q) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}

func TestCanonicalFormIgnoresVariableOrderAndSpacing(t *testing.T) {
	read := func(body string) []byte {
		t.Helper()
		r, err := ReadBody("application/json", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.AppendCanonical(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := read(`{"query":"mutation($a: Int, $b: Int) { x }","variables":{"a":1,"b":2}}`)
	b := read(`{"variables": {"b":2, "a":1}, "query":"mutation($a: Int, $b: Int) { x }"}`)
	if string(a) != string(b) {
		t.Errorf("the same variables in another order differ:\n%q\n%q", a, b)
	}
	for name, other := range map[string]string{
		"another value":          `{"query":"mutation($a: Int, $b: Int) { x }","variables":{"a":1,"b":3}}`,
		"another document":       `{"query":"mutation($a: Int, $b: Int) { y }","variables":{"a":1,"b":2}}`,
		"another operation name": `{"query":"mutation X($a: Int, $b: Int) { x }","variables":{"a":1,"b":2},"operationName":"X"}`,
	} {
		if string(read(other)) == string(a) {
			t.Errorf("%s hashes the same", name)
		}
	}
	if string(read(`{"query":"mutation { x }"}`)) != string(read(`{"query":"mutation { x }","variables":null}`)) {
		t.Error("absent and null variables differ")
	}
}

package graphqlop

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzReadBody(f *testing.F) {
	for _, s := range []string{
		`{"query":"mutation { a @idempotent(key: \"k\") }"}`,
		`{"query":"mutation($k: String) { a @idempotent(key: $k) }","variables":{"k":"v"}}`,
		`{"query":"query A { a } mutation B { b }","operationName":"B"}`,
		`[{"query":"{ a }"},{"query":"mutation { b }"}]`,
		`{"query":"mutation { ...F } fragment F on M { ...F a @idempotent(key: \"x\") }"}`,
		`{"query":"{ a }","Query":"mutation { b }"}`,
		`{"query":"mutation($k: String) { a @idempotent(key: $k) }","variables":"{\"k\":\"v\"}"}`,
		`{"operationName":"C","variables":{"a":1},"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}}}`,
	} {
		f.Add("application/json", []byte(s))
	}
	f.Add("application/graphql", []byte(`mutation { a @idempotent(key: """block""") }`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		r, err := ReadBody(contentType, body)
		switch {
		case err == nil:
		case err == ErrNotGraphQL, errors.Is(err, ErrAmbiguous), errors.Is(err, ErrInvalidKey):
			if r.Kind != None || r.Document != "" {
				t.Fatalf("a request with the error %v", err)
			}
			return
		default:
			t.Fatalf("unexpected error %v", err)
		}
		if r.HasKey && r.Kind != Mutation {
			t.Fatalf("a key on a %v", r.Kind)
		}
		if r.Batch {
			return
		}
		a, err := r.AppendCanonical(nil)
		if err != nil {
			t.Fatalf("AppendCanonical of a request ReadBody returned: %v", err)
		}
		b, _ := r.AppendCanonical([]byte("x"))
		c, _ := r.Canonical()
		if !bytes.Equal(a, b[1:]) || !bytes.Equal(a, c) {
			t.Fatal("AppendCanonical is not deterministic")
		}
		// Reading the same body again reads the same request.
		again, err := ReadBody(contentType, body)
		if err != nil || again.Kind != r.Kind || again.Key != r.Key {
			t.Fatalf("a second reading differs: %+v, %v", again, err)
		}
	})
}

func FuzzMutationInQuery(f *testing.F) {
	f.Add("query=mutation+%7B+a+%7D")
	f.Add("query=%7B+a+%7D&operationName=x")
	f.Fuzz(func(t *testing.T, raw string) {
		MutationInQuery(raw) // must not panic
	})
}

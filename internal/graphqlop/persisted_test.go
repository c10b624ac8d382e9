package graphqlop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
)

func persisted(doc, hash, variables string) []byte {
	b, _ := json.Marshal(doc)
	q := ""
	if doc != "" {
		q = `"query":` + string(b) + `,`
	}
	return []byte(`{` + q + `"operationName":"Charge","variables":` + variables + `,"extensions":{"persistedQuery":{"version":1,"sha256Hash":"` + hash + `"}}}`)
}

func hashOf(doc string) string {
	sum := sha256.Sum256([]byte(doc))
	return hex.EncodeToString(sum[:])
}

// A persisted mutation's hash alone and the hash with its document are one
// request: the same canonical form, which the variables' order does not
// change and their values do.
func TestPersistedQueryIsKnownByItsHashWithOrWithoutItsDocument(t *testing.T) {
	doc := `mutation Charge($a: Int!, $c: String) { charge(amount: $a, currency: $c) { id } }`
	h := hashOf(doc)
	form := func(body []byte, kind Kind) []byte {
		t.Helper()
		r, err := ReadBody("application/json", body)
		if err != nil || r.Kind != kind || r.Hash != h {
			t.Fatalf("%s: kind %v, hash %q, %v; want %v by its hash", body, r.Kind, r.Hash, err, kind)
		}
		f, err := r.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	alone := form(persisted("", h, `{"a":1,"c":"eur"}`), Persisted)
	if got := form(persisted(doc, h, `{"c":"eur","a":1}`), Mutation); !bytes.Equal(got, alone) {
		t.Errorf("with its document: %q, want the form of the hash alone %q", got, alone)
	}
	if got := form([]byte(`{"query":null,`+string(persisted("", h, `{"a":1,"c":"eur"}`)[1:])), Persisted); !bytes.Equal(got, alone) {
		t.Errorf("with a null query: %q, want the form of the hash alone", got)
	}
	if got := form(persisted("", h, `{"a":2,"c":"eur"}`), Persisted); bytes.Equal(got, alone) {
		t.Error("other variables have the same form")
	}
	// A query sent with its hash is a query still.
	if r, err := ReadBody("application/json", persisted(`query Charge { a }`, hashOf(`query Charge { a }`), `{}`)); err != nil || r.Kind != Query {
		t.Errorf("a persisted query with its document: kind %v, %v; want Query", r.Kind, err)
	}
	// A batch holding a hash alone is protected as any request, as before.
	batch := append(append([]byte("["), persisted("", h, `{}`)...), ']')
	if _, err := ReadBody("application/json", batch); err != ErrNotGraphQL {
		t.Errorf("a batch holding a hash alone: %v, want ErrNotGraphQL", err)
	}
}

func TestPersistedMutationWhoseHashNamesAnotherDocumentIsAmbiguous(t *testing.T) {
	doc := `mutation Charge { charge { id } }`
	_, err := ReadBody("application/json", persisted(doc, hashOf(doc+" "), `{}`))
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
}

func TestPersistedQueryNotFoundIsTheServersRefusal(t *testing.T) {
	for body, want := range map[string]bool{
		`{"errors":[{"message":"PersistedQueryNotFound","extensions":{"code":"PERSISTED_QUERY_NOT_FOUND"}}]}`: true,
		`{"errors":[{"message":"PersistedQueryNotFound"}]}`:                                                   true,
		`{"errors":[{"message":"not found","extensions":{"code":"PERSISTED_QUERY_NOT_FOUND"}}],"data":null}`:  true,
		`{"data":{"charge":{"id":1}}}`:                                               false,
		`{"data":{"charge":null},"errors":[{"message":"PersistedQueryNotFound"}]}`:   false,
		`{"errors":[{"message":"declined","extensions":{"code":"BAD_USER_INPUT"}}]}`: false,
		`PersistedQueryNotFound`:                                                     false,
		``:                                                                           false,
	} {
		if got := PersistedQueryNotFound([]byte(body)); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}

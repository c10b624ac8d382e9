package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// An operator copies the key as the client sent it, raw or as an RFC 8941
// string: both forms name the same key on the request path, so the hash
// the key API computes for either must be the one the request used, or
// `keys get` finds nothing for a key that is there.
func TestKeyHashOfAQuotedKeyIsTheStorageKeyOfTheRequest(t *testing.T) {
	h := newKeyHashHandler(t, nil)
	req := httptest.NewRequest("POST", "http://api.example/v1/charges", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer client-a")
	want := storageKeyFrom(req, readAs{}, "k-1", DefaultPolicy().ScopeHeaders, KeyFromHeader, "")
	for _, sent := range []string{`"k-1"`, ` k-1 `} {
		got, err := h.KeyHashFrom(req, sent, "")
		if err != nil || got != want {
			t.Errorf("KeyHashFrom(%q) = %q, %v; want %q, the storage key the request path uses", sent, got, err, want)
		}
	}
}

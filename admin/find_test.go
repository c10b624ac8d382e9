package admin

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// GET /admin/keys?key=RAW finds the records of a raw key in every scope,
// each with its scope hash, and nothing of another key nor a lease.
func TestListByRawKeyFindsItsRecordsInEveryScope(t *testing.T) {
	e := newEnv(t, testToken)
	scopeA, scopeB := [16]byte{0xa}, [16]byte{0xb}
	for _, c := range []struct {
		hash, raw string
		scope     [16]byte
	}{{"aa01", "order-42", scopeA}, {"bb02", "order-42", scopeB}, {"cc03", "order-43", scopeA}} {
		en := completedEntry(c.hash)
		en.Record.Lookup = store.Lookup{Key: store.LookupKey(c.raw), Scope: c.scope}
		e.st.entries[c.hash] = en
	}
	e.st.entries["dd04"] = leaseEntry("dd04")
	e.st.next = "more"

	rec := e.do(t, "GET", "/admin/keys?"+url.Values{"key": {"order-42"}, "limit": {"1000"}}.Encode(), bearer, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET ?key= = %d %s", rec.Code, rec.Body)
	}
	var out struct {
		Keys []struct {
			KeyHash   string `json:"key_hash"`
			ScopeHash string `json:"scope_hash"`
		} `json:"keys"`
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range out.Keys {
		got = append(got, k.KeyHash+" "+k.ScopeHash)
	}
	slices.Sort(got)
	want := []string{"aa01 " + hex.EncodeToString(scopeA[:]), "bb02 " + hex.EncodeToString(scopeB[:])}
	if !slices.Equal(got, want) || out.NextCursor != "more" {
		t.Errorf("found %q, next %q; want %q and the store's next cursor, to page on", got, out.NextCursor, want)
	}
	if st := e.st.listArgs[0]; st != store.Completed {
		t.Errorf("listed state %v, want only records: leases keep no lookup", st)
	}
	if rec := e.do(t, "GET", "/admin/keys?key=", bearer, ""); rec.Code != http.StatusBadRequest {
		t.Errorf("GET ?key= (empty) = %d, want 400", rec.Code)
	}
}

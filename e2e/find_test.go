package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// TestKeysFindsARawKeyInEveryScopeWithoutTheCredential: with keys scoped
// by Authorization, two clients send the same raw key; `keys find KEY`,
// run with only the admin token, finds both records, each with its own
// key_hash (the one `keys hash` gives with that client's Authorization)
// and scope_hash, and not the record of another key. On each store that
// keeps records across processes, and in memory.
func TestKeysFindsARawKeyInEveryScopeWithoutTheCredential(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "store:\n  kind: memory\n" },
		"file": func(t *testing.T) string {
			return fmt.Sprintf("store:\n  kind: file\n  file:\n    path: %q\n", filepath.Join(t.TempDir(), "keys"))
		},
		"redis": func(t *testing.T) string {
			return fmt.Sprintf("store:\n  kind: redis\n  redis:\n    url: %q\n", redistest.Start(t).URL())
		},
	}
	for name, storeYAML := range stores {
		t.Run(name, func(t *testing.T) {
			up := startUpstream(t)
			p := startAdminProxy(t, up, storeYAML(t))
			c := newClient(t, 10*time.Second)
			send := func(key, auth string) {
				t.Helper()
				r := mustSend(t, c, p.URL(), request{Key: key, Header: map[string]string{"Authorization": auth}})
				if r.Status != http.StatusCreated {
					t.Fatalf("%s as %s: %s, want 201", key, auth, r)
				}
			}
			send("order-42", "Bearer alice")
			send("order-42", "Bearer bob")
			send("order-43", "Bearer alice")
			if n := up.Count("order-42"); n != 2 {
				t.Fatalf("order-42 executed %d times, want once in each scope", n)
			}

			found := keysJSON(t, p, "find", "order-42")["keys"].([]any)
			var got []string
			scopes := map[string]bool{}
			for _, k := range found {
				e := k.(map[string]any)
				got = append(got, e["key_hash"].(string))
				scopes[fmt.Sprint(e["scope_hash"])] = true
				if e["state"] != "completed" || e["path"] != "/v1/orders" {
					t.Errorf("found %v, want a completed record of POST /v1/orders", e)
				}
			}
			var want []string
			for _, auth := range []string{"Bearer alice", "Bearer bob"} {
				h := keysJSON(t, p, "hash", "--key", "order-42", "--path", "/v1/orders", "--header", "Authorization: "+auth)
				want = append(want, h["key_hash"].(string))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("keys find order-42 = %v, want the two scopes' key_hashes %v", got, want)
			}
			if len(scopes) != 2 || scopes["<nil>"] || scopes[""] {
				t.Errorf("scope hashes %v, want two, one per client", scopes)
			}
			if none := keysJSON(t, p, "find", "order-44")["keys"].([]any); len(none) != 0 {
				t.Errorf("keys find order-44 = %v, want nothing", none)
			}
		})
	}
}

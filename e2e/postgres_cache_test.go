package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
)

// TestKeyDeletedOnOneReplicaIsNewAtOnceOnAnother: two proxies share one
// database with the Postgres store's defaults, its cache on. The second
// replays a key's record, from its memory after the first time; the key
// is deleted with the key API of the first; the very next retry through
// the second executes again.
func TestKeyDeletedOnOneReplicaIsNewAtOnceOnAnother(t *testing.T) {
	pg := pgtest.Start(t)
	up := startUpstream(t)
	storeYAML := fmt.Sprintf("store:\n  kind: postgres\n  postgres:\n    url: %q\n", pg.URL())
	a := startAdminProxy(t, up, storeYAML)
	b := startAdminProxy(t, up, storeYAML)
	const key = "charge-deleted-elsewhere"
	code, body := keyedPost(t, a, "/v1/charges", key, false)
	if code != http.StatusCreated {
		t.Fatalf("first POST: %d, want 201", code)
	}
	for range 3 {
		if c, got := keyedPost(t, b, "/v1/charges", key, false); c != code || got != body {
			t.Fatalf("retry through the other replica: %d %q, want the replay %d %q", c, got, code, body)
		}
	}
	if n := up.Count(key); n != 1 {
		t.Fatalf("%d executions before the delete, want 1", n)
	}
	hash := keysJSON(t, a, "hash", "--key", key, "--method", "POST", "--path", "/v1/charges", "--host", a.listen,
		"--header", "Authorization: "+clientAuth)["key_hash"].(string)
	if del := keysJSON(t, a, "delete", hash); del["deleted"] != true {
		t.Fatalf("keys delete = %v", del)
	}
	if c, _ := keyedPost(t, b, "/v1/charges", key, false); c != http.StatusCreated || up.Count(key) != 2 {
		t.Fatalf("retry through the other replica right after the delete: %d, %d executions; want 201 and a second execution", c, up.Count(key))
	}
}

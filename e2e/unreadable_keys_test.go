package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// TestUndecodableRecordIsShownAndTheKeyAPIGoesOn: a Redis value that does
// not decode (a newer version's record during a rolling upgrade, damaged
// bytes) is refused to clients with 503 record-unreadable, and the key API
// shows it rather than failing: `keys get` and `keys list` show it
// unreadable (format), and `keys find`, which pages through the whole
// store, still finds the other keys. `keys delete` then makes it new.
func TestUndecodableRecordIsShownAndTheKeyAPIGoesOn(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	p := startAdminProxy(t, up, fmt.Sprintf("store:\n  kind: redis\n  redis:\n    url: %q\n", srv.URL()))
	c := newClient(t, 10*time.Second)
	send := func(key string, want int) reply {
		t.Helper()
		r := mustSend(t, c, p.URL(), request{Key: key})
		if r.Status != want {
			t.Fatalf("%s: %s %s, want %d", key, r, r.Body, want)
		}
		return r
	}
	send("order-42", http.StatusCreated)
	before := redisValues(t, srv, "idem:{*")
	send("order-43", http.StatusCreated)
	var damaged string
	for k := range redisValues(t, srv, "idem:{*") {
		if _, ok := before[k]; !ok {
			damaged = k
		}
	}
	// A record ('R') of a format version this one does not read.
	if err := srv.Client(t).Set(context.Background(), damaged, "R\xff\xfe", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	hash := strings.TrimSuffix(strings.TrimPrefix(damaged, "idem:{"), "}")

	if r := send("order-43", http.StatusServiceUnavailable); r.Problem() != "record-unreadable" {
		t.Fatalf("order-43 once undecodable: %s, want record-unreadable", r)
	}
	if got := keysJSON(t, p, "get", hash); got["state"] != "completed" || got["unreadable"] != "format" {
		t.Errorf("keys get %s = %v, want a completed record, unreadable: format", hash, got)
	}
	listed := map[string]any{}
	for _, k := range keysJSON(t, p, "list")["keys"].([]any) {
		e := k.(map[string]any)
		listed[e["key_hash"].(string)] = e["unreadable"]
	}
	if len(listed) != 2 || listed[hash] != "format" {
		t.Errorf("keys list = %v, want both keys, %s unreadable: format", listed, hash)
	}
	if found := keysJSON(t, p, "find", "order-42")["keys"].([]any); len(found) != 1 {
		t.Errorf("keys find order-42 = %v, want its record", found)
	}

	keysJSON(t, p, "delete", hash)
	send("order-43", http.StatusCreated)
	if n := up.Count("order-43"); n != 2 {
		t.Errorf("order-43 executed %d times, want once more after its deletion", n)
	}
}

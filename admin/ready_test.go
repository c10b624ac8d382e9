package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

func TestReadyzIs503WithTheStoresCause(t *testing.T) {
	e := newEnv(t, "")
	e.st.pingErr = fmt.Errorf("ping: %w: NOAUTH Authentication required", store.ErrUnavailable)
	rec := e.do(t, "GET", "/readyz", "", "")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "NOAUTH Authentication required") {
		t.Fatalf("/readyz = %d %q, want 503 naming the cause", rec.Code, rec.Body.String())
	}
	if !strings.Contains(e.logs.String(), `"level":"ERROR"`) || !strings.Contains(e.logs.String(), "NOAUTH") {
		t.Errorf("the store failure was not logged at error level with its cause: %s", e.logs.String())
	}
	e.st.pingErr = nil
	if rec := e.do(t, "GET", "/readyz", "", ""); rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("/readyz after recovery = %d %q, want 200 ok", rec.Code, rec.Body.String())
	}
}

// Unsafe eviction and a full store leave the proxy ready (taking it out of
// the Service fixes neither) but are named in the body, the gauge and the log.
func TestReadyzNamesUnsafeEvictionAndAFullStore(t *testing.T) {
	e := newEnv(t, "")
	gauge := func() float64 { return testutil.ToFloat64(e.h.metrics.evictionUnsafe) }
	e.st.health = store.Health{Server: "redis 7.2.4", EvictionPolicy: "allkeys-lru", EvictionUnsafe: true, Full: true}
	for range 3 {
		rec := e.do(t, "GET", "/readyz", "", "")
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.Contains(body, "eviction unsafe") ||
			!strings.Contains(body, "allkeys-lru") || !strings.Contains(body, "store full") {
			t.Fatalf("/readyz = %d %q, want 200 naming unsafe eviction (allkeys-lru) and a full store", rec.Code, body)
		}
	}
	if gauge() != 1 || testutil.ToFloat64(e.h.metrics.full) != 1 {
		t.Errorf("eviction_unsafe = %v, store_full = %v, want 1 and 1", gauge(), testutil.ToFloat64(e.h.metrics.full))
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "maxmemory-policy noeviction"); n != 1 {
		t.Errorf("the fix was logged %d times over three probes, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("unsafe eviction not logged at error level:\n%s", logs)
	}

	e.st.health = store.Health{Server: "redis 7.2.4", EvictionPolicy: "noeviction"}
	if rec := e.do(t, "GET", "/readyz", "", ""); rec.Body.String() != "ok\n" {
		t.Errorf("/readyz after the fix = %q, want ok", rec.Body.String())
	}
	if gauge() != 0 || testutil.ToFloat64(e.h.metrics.full) != 0 {
		t.Errorf("eviction_unsafe = %v, store_full = %v after the fix, want 0 and 0", gauge(), testutil.ToFloat64(e.h.metrics.full))
	}
}

func TestCheckStoreLogsTheCauseAtStart(t *testing.T) {
	e := newEnv(t, "")
	e.st.pingErr = fmt.Errorf("ping: %w: dial tcp 127.0.0.1:1: connect: connection refused", store.ErrUnavailable)
	if err := e.h.CheckStore(context.Background()); err == nil {
		t.Fatal("CheckStore = nil with the store down")
	}
	if !strings.Contains(e.logs.String(), "connection refused") || !strings.Contains(e.logs.String(), `"level":"ERROR"`) {
		t.Errorf("start check log lacks the cause at error level: %s", e.logs.String())
	}
	e.st.pingErr = nil
	e.st.health = store.Health{EvictionPolicy: "volatile-lru", EvictionUnsafe: true}
	e.logs.Reset()
	if err := e.h.CheckStore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.logs.String(), "noeviction") || !strings.Contains(e.logs.String(), "store answers again") {
		t.Errorf("recovery and unsafe eviction not logged: %s", e.logs.String())
	}
}

// From Drain on, /readyz answers 503 saying the proxy is draining, while
// the store is fine and /healthz stays 200.
func TestReadyzIs503WhileDraining(t *testing.T) {
	e := newEnv(t, "")
	if rec := e.do(t, "GET", "/readyz", "", ""); rec.Code != http.StatusOK {
		t.Fatalf("/readyz before the drain = %d, want 200", rec.Code)
	}
	e.h.Drain()
	if rec := e.do(t, "GET", "/readyz", "", ""); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "draining") {
		t.Fatalf("/readyz while draining = %d %q, want 503 saying draining", rec.Code, rec.Body.String())
	}
	if rec := e.do(t, "GET", "/healthz", "", ""); rec.Code != http.StatusOK {
		t.Errorf("/healthz while draining = %d, want 200", rec.Code)
	}
}

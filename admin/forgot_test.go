package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A store that forgot its data is logged at error level with the fix,
// counted once per loss, and named in /readyz from then on, which stays 200
// (restarting the proxy brings nothing back).
func TestStoreThatForgotIsLoggedCountedAndNamedInReadyz(t *testing.T) {
	e := newEnv(t, "")
	e.st.health = store.Health{Server: "redis 7.0.15", EvictionPolicy: "noeviction",
		Forgot: []string{"redis forgot the proxy's leases and records: its epoch marker idem:epoch:{0} is gone"}}
	rec := e.do(t, "GET", "/readyz", "", "")
	e.st.health.Forgot = nil
	later := e.do(t, "GET", "/readyz", "", "")
	for _, r := range []*http.Response{rec.Result(), later.Result()} {
		if r.StatusCode != http.StatusOK {
			t.Errorf("/readyz = %d, want 200", r.StatusCode)
		}
	}
	if body := later.Body.String(); !strings.Contains(body, "store data lost 1 time(s)") || !strings.Contains(body, "idem:epoch:{0} is gone") {
		t.Errorf("/readyz after the loss = %q, want it named", body)
	}
	if got := testutil.ToFloat64(e.h.metrics.dataLoss); got != 1 {
		t.Errorf("store_data_loss_total = %v, want 1", got)
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "the store forgot what it held"); n != 1 || !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, "appendonly yes") {
		t.Errorf("want one error line with the fix:\n%s", logs)
	}
}

// A route whose lock_ttl is shorter than MinLockTTL of the store's
// failover time is logged once, sets the gauge and is named in /readyz; a
// reload that raises it clears all three.
func TestLockTTLThatCannotOutliveAFailoverIsNamed(t *testing.T) {
	ttls := map[string]time.Duration{"default": 30 * time.Second, "POST /v1/charges": 3 * time.Second}
	e := newEnv(t, "", func(o *Options) { o.LockTTLs = func() map[string]time.Duration { return ttls } })
	e.st.health = store.Health{Server: "redis 7.0.15", EvictionPolicy: "noeviction", FailoverTime: 3 * time.Second}
	gauge := func() float64 { return testutil.ToFloat64(e.h.metrics.lockTTLUnsafe) }
	for range 2 {
		body := e.do(t, "GET", "/readyz", "", "").Body.String()
		if !strings.Contains(body, "POST /v1/charges (lock_ttl 3s)") || strings.Contains(body, "default") || !strings.Contains(body, "at least 5s") {
			t.Fatalf("/readyz = %q, want the 3s route named and 5s asked for", body)
		}
	}
	if gauge() != 1 {
		t.Errorf("lock_ttl_unsafe = %v, want 1", gauge())
	}
	if n := strings.Count(e.logs.String(), "lock_ttl cannot outlive a failover"); n != 1 {
		t.Errorf("logged %d times over two probes, want once:\n%s", n, e.logs.String())
	}
	ttls = map[string]time.Duration{"default": 30 * time.Second, "POST /v1/charges": 5 * time.Second}
	if body := e.do(t, "GET", "/readyz", "", "").Body.String(); body != "ok\n" || gauge() != 0 {
		t.Errorf("after raising lock_ttl: /readyz %q, gauge %v; want ok and 0", body, gauge())
	}
}

func TestMinLockTTLLeavesTwoThirdsForTheFailover(t *testing.T) {
	for _, tt := range []struct{ failover, want time.Duration }{
		{3 * time.Second, 5 * time.Second},         // down-after 1s: 3s is too short, as measured; 10s is safe
		{32 * time.Second, 48 * time.Second},       // Sentinel's default down-after of 30s
		{2500 * time.Millisecond, 4 * time.Second}, // rounded up to a second
	} {
		if got := MinLockTTL(tt.failover); got != tt.want {
			t.Errorf("MinLockTTL(%v) = %v, want %v", tt.failover, got, tt.want)
		}
	}
}

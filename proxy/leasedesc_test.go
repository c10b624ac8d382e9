package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestLeaseSaysWhoHoldsTheKeyAndSince: while a request runs, its key's
// lease names its method, host, path without the query, route, start and
// the proxy instance, and a duplicate's 409 in-flight says since when the
// key has been running, in started_at and in its detail.
func TestLeaseSaysWhoHoldsTheKeyAndSince(t *testing.T) {
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release), func(o *Options) {
		o.Instance = "proxy-test/42"
		o.Routes = []Route{{Pattern: "POST /x", Policy: DefaultPolicy()}}
	})
	before := time.Now().Truncate(time.Millisecond)
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x?secret=1", "k", "{}") }()
	<-arrived
	defer func() {
		close(release)
		<-first
	}()

	ins, ok := e.store.(interface {
		Inspect(ctx context.Context, key string) (store.Entry, error)
	})
	if !ok {
		t.Fatal("the test store has no Inspect")
	}
	ent, err := ins.Inspect(context.Background(), e.keyHash(t, "k"))
	if err != nil || ent.State != store.InFlight {
		t.Fatalf("Inspect = %+v, %v; want in flight", ent, err)
	}
	q, l := ent.Lease.Request, ent.Lease
	if q.Method != "POST" || q.Path != "/x" || q.Route != "POST /x" || q.Host != "127.0.0.1" || l.Instance != "proxy-test/42" || l.TraceID != "" {
		t.Errorf("lease = %+v, want POST /x on route POST /x by proxy-test/42, no query, no trace", l)
	}
	if q.StartedAt.Before(before) || q.StartedAt.After(time.Now()) {
		t.Errorf("lease started at %v, want between %v and now", q.StartedAt, before)
	}

	r := e.do(t, "POST", "/x?secret=1", "k", "{}")
	var body map[string]any
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("409 body %q: %v", r.body, err)
	}
	since := q.StartedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	if r.StatusCode != http.StatusConflict || body["started_at"] != since {
		t.Errorf("duplicate = %d %s, want 409 with started_at %s", r.StatusCode, r.body, since)
	}
	if d, _ := body["detail"].(string); !strings.Contains(d, "running since "+since+",") {
		t.Errorf("409 detail %q does not say since %s", d, since)
	}
	if strings.Contains(r.body, "secret") || strings.Contains(r.body, "proxy-test") {
		t.Errorf("409 body %q shows the query or the instance", r.body)
	}
}

// A process given no instance name names itself in its leases by its host
// name and process id, HOST/PID (docs/operating.md, "Instance").
func TestDefaultInstanceIsHostAndPID(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown" // a host without a name is named so
	}
	if got, want := DefaultInstance(), host+"/"+strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("DefaultInstance() = %q, want %q", got, want)
	}
}

// TestLeaseAndRecordNameTheHostTheFingerprintLeavesOut: under
// fingerprint_host: false the host is left out of the fingerprint only;
// the key's lease and its record still say what host the request came to.
func TestLeaseAndRecordNameTheHostTheFingerprintLeavesOut(t *testing.T) {
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release), withPolicy(func(p *Policy) { p.FingerprintHost = false }))
	ins, ok := e.store.(interface {
		Inspect(ctx context.Context, key string) (store.Entry, error)
	})
	if !ok {
		t.Fatal("the test store has no Inspect")
	}
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}") }()
	<-arrived
	ent, err := ins.Inspect(context.Background(), e.keyHash(t, "k"))
	close(release)
	if r := <-first; r.StatusCode != http.StatusOK {
		t.Fatalf("first = %d, want 200", r.StatusCode)
	}
	if err != nil || ent.State != store.InFlight || ent.Lease.Request.Host != "127.0.0.1" {
		t.Fatalf("Inspect = %+v, %v; want in flight, its lease naming host 127.0.0.1", ent, err)
	}

	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusOK || !r.replayed() {
		t.Fatalf("retry = %d replayed=%v, want the replay", r.StatusCode, r.replayed())
	}
	ent, err = ins.Inspect(context.Background(), e.keyHash(t, "k"))
	if err != nil || ent.State != store.Completed || ent.Record == nil || ent.Record.Request.Host != "127.0.0.1" {
		t.Fatalf("Inspect = %+v, %v; want the record, naming host 127.0.0.1", ent, err)
	}
}

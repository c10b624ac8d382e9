package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// A found lookup's answer is recorded as a forwarded answer is: without
// the fields of the upstream's connection, those its Connection names
// among them, for the first caller and every retry.
func TestFoundAnswerIsRecordedWithoutTheFieldsItsConnectionNames(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Connection", "X-Hop")
			w.Header().Set("X-Hop", "this connection only")
			w.Header().Set("X-Charge-State", "settled")
		}
		l.serve(w, r)
	}, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	first := e.do(t, "POST", "/x", "k1", `{}`)
	retry := e.do(t, "POST", "/x", "k1", `{}`)
	for _, r := range []*response{first, retry} {
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Charge-State") != "settled" {
			t.Fatalf("%d %v, want the lookup's answer", r.StatusCode, r.Header)
		}
		if got := r.Header.Get("X-Hop"); got != "" {
			t.Errorf("replayed X-Hop %q, a field the lookup's Connection named", got)
		}
	}
}

// A lookup carries the request's headers that the forwarded request
// carried: none that the client's Connection names, which the reverse
// proxy dropped from it.
func TestLookupCarriesNoFieldTheClientsConnectionNames(t *testing.T) {
	var mu sync.Mutex
	var forwarded, lookup http.Header
	l := &chargeLedger{charges: map[string]bool{}}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method == http.MethodGet {
			lookup = r.Header.Clone()
		} else {
			forwarded = r.Header.Clone()
		}
		mu.Unlock()
		l.serve(w, r)
	}, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.Headers = []string{"X-Tenant", "X-Hop"}
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	r := e.do(t, "POST", "/x", "k1", `{}`, "Connection", "X-Hop", "X-Hop", "this connection only", "X-Tenant", "acme")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("%d %s, want the found charge", r.StatusCode, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := forwarded.Get("X-Hop"); got != "" {
		t.Fatalf("the forwarded request carried X-Hop %q", got)
	}
	if got := lookup.Get("X-Tenant"); got != "acme" {
		t.Errorf("lookup's X-Tenant = %q, want acme", got)
	}
	if got := lookup.Get("X-Hop"); got != "" {
		t.Errorf("lookup carried X-Hop %q, which the client's Connection named", got)
	}
}

// A recorded answer keeps none of the fields of the upstream's
// connection, those its Connection names among them: neither its first
// caller nor a replay gets them.
func TestRecordedAnswerKeepsNoFieldItsConnectionNames(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "this connection only")
		w.Header().Set("X-Charge", "ch_1")
		w.WriteHeader(http.StatusCreated)
	})
	first := e.do(t, "POST", "/x", "k1", `{}`)
	retry := e.do(t, "POST", "/x", "k1", `{}`)
	if !retry.replayed() {
		t.Fatalf("retry: %d, want a replay", retry.StatusCode)
	}
	for _, r := range []*response{first, retry} {
		if r.StatusCode != http.StatusCreated || r.Header.Get("X-Charge") != "ch_1" {
			t.Fatalf("%d %v, want the upstream's 201", r.StatusCode, r.Header)
		}
		if got := r.Header.Get("X-Hop"); got != "" {
			t.Errorf("X-Hop %q reached the client, a field the upstream's Connection named", got)
		}
	}
}

package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Options.Observe is told of every answered request: the pattern of the
// route it matched, "" when the defaults applied, what the proxy did with
// it, and its key's hash, "" without a key.
func TestObserverIsToldEachRequestsRouteOutcomeAndKeyHash(t *testing.T) {
	seen := make(chan Observation, 8)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }, func(o *Options) {
		o.Routes = []Route{{Pattern: "POST /v1/charges", Policy: DefaultPolicy()}}
		o.Observe = func(_ *http.Request, ob Observation) { seen <- ob }
	})
	charges, err := e.handler.KeyHashFrom(httptest.NewRequest("POST", "/v1/charges", nil), "k", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, key string
		want      Observation
	}{
		{"/v1/charges", "k", Observation{Route: "POST /v1/charges", Outcome: OutcomeExecuted, KeyHash: charges}},
		{"/v1/charges", "k", Observation{Route: "POST /v1/charges", Outcome: OutcomeReplayed, KeyHash: charges}},
		{"/x", "k2", Observation{Outcome: OutcomeExecuted, KeyHash: e.keyHash(t, "k2")}},
		{"/x", "", Observation{Outcome: OutcomeNoKey}},
	} {
		e.do(t, "POST", tc.path, tc.key, "{}")
		if got := <-seen; got != tc.want {
			t.Errorf("POST %s with key %q: observed %+v, want %+v", tc.path, tc.key, got, tc.want)
		}
	}
}

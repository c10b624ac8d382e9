package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

const (
	expiresTTL   = 5 * time.Minute
	expiresToken = "expires-token"
)

// TestAdvertisedExpiryIsRecordCreationPlusTTLOnExecutionAndReplay runs the
// built binary with advertise_expiry: true. The executed response and its
// replay carry the same Idempotency-Expires: an HTTP-date equal to the
// record's creation (as the key API shows it) plus ttl, rounded down to
// the second, so a retry sent before it is always replayed. That holds
// for a response whose body completes in a later second than its status
// line too.
func TestAdvertisedExpiryIsRecordCreationPlusTTLOnExecutionAndReplay(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startScriptedUpstream(t)
			p := startProxy(t, "expires-"+kind, expiresConfig(t, kind, up))
			c := newClient(t, 15*time.Second)
			for _, tc := range []struct{ key, answer string }{
				{"fast-1", "ok"},
				{"slow-body-1", "slow-body"},
			} {
				before := time.Now()
				first := answer(t, c, p, tc.key, tc.answer)
				after := time.Now()
				if first.Status != http.StatusCreated || first.Replayed() {
					t.Fatalf("%s: %s, want an executed 201", tc.key, first)
				}
				exp := advertisedExpiry(t, tc.key, first)
				if lo, hi := before.Add(expiresTTL).Truncate(time.Second), after.Add(expiresTTL); exp.Before(lo) || exp.After(hi) {
					t.Errorf("%s: Idempotency-Expires %v, want between %v and %v (sent + ttl)", tc.key, exp, lo, hi)
				}
				replay := answer(t, c, p, tc.key, tc.answer)
				if !replay.Replayed() {
					t.Fatalf("%s retry: %s, want a replay", tc.key, replay)
				}
				if got, want := replay.Header.Get("Idempotency-Expires"), first.Header.Get("Idempotency-Expires"); got != want {
					t.Errorf("%s: the replay advertises %q, the executed response %q", tc.key, got, want)
				}
				created := recordCreated(t, p, tc.key)
				if want := created.Add(expiresTTL).Truncate(time.Second); !exp.Equal(want) {
					t.Errorf("%s: Idempotency-Expires %v, want record creation %v + ttl rounded down = %v",
						tc.key, exp, created, want)
				}
			}
		})
	}
}

// TestNoExpiryOnReleasedOrProblemResponses: a response the proxy does not
// record (released by the upstream's no-store) and the proxy's own 409
// and 422 problems promise no replay, so they carry no Idempotency-Expires.
func TestNoExpiryOnReleasedOrProblemResponses(t *testing.T) {
	up := startScriptedUpstream(t)
	p := startProxy(t, "expires-none", expiresConfig(t, "memory", up))
	c := newClient(t, 15*time.Second)

	wantNone := func(what string, r reply) {
		t.Helper()
		if v, ok := r.Header["Idempotency-Expires"]; ok {
			t.Errorf("%s (%s) carries Idempotency-Expires %q", what, r, v)
		}
	}
	if r := answer(t, c, p, "released-1", "no-store"); r.Status != http.StatusConflict || r.Problem() != "" {
		t.Errorf("no-store answer: %s, want the upstream's 409", r)
	} else {
		wantNone("a released response", r)
	}

	held := make(chan reply, 1)
	go func() {
		held <- send(t.Context(), c, p.URL(), request{Key: "held-1", Body: `{"amount":1}`, Header: map[string]string{hdrAnswer: "hold"}})
	}()
	<-up.held
	if r := answer(t, c, p, "held-1", "ok"); r.Problem() != "in-flight" {
		t.Errorf("retry while in flight: %s, want 409 in-flight", r)
	} else {
		wantNone("the 409 in-flight problem", r)
	}
	up.Release()
	if r := <-held; r.Err != nil || r.Status != http.StatusCreated {
		t.Errorf("held request: %s, want 201", r)
	} else {
		advertisedExpiry(t, "held-1", r) // the control case: executed responses do carry it
	}

	r := mustSend(t, c, p.URL(), request{Key: "held-1", Body: `{"amount":2}`})
	if r.Problem() != "payload-mismatch" {
		t.Errorf("same key, other body: %s, want 422 payload-mismatch", r)
	} else {
		wantNone("the 422 payload-mismatch problem", r)
	}
}

func expiresConfig(t *testing.T, kind string, up *scriptedUpstream) proxyConfig {
	cfg := scriptedConfig(t, kind, up, map[string]string{"ttl": expiresTTL.String(), "advertise_expiry": "true"})
	cfg.Extra = "admin:\n  token: " + expiresToken + "\n"
	return cfg
}

// advertisedExpiry parses r's Idempotency-Expires, which must be an
// HTTP-date in its preferred form (IMF-fixdate), as clients parse it.
func advertisedExpiry(t *testing.T, what string, r reply) time.Time {
	t.Helper()
	v := r.Header.Get("Idempotency-Expires")
	exp, err := time.Parse(http.TimeFormat, v)
	if err != nil {
		t.Fatalf("%s: Idempotency-Expires %q is not an HTTP-date: %v", what, v, err)
	}
	return exp
}

// recordCreated asks the key API when the record of key (sent to
// /v1/orders with the default header source) was created.
func recordCreated(t *testing.T, p *proxyProc, key string) time.Time {
	t.Helper()
	var hashed struct {
		KeyHash string `json:"key_hash"`
	}
	in, _ := json.Marshal(map[string]any{"key": key, "path": "/v1/orders", "host": p.listen})
	adminCall(t, p, expiresToken, "POST", "/admin/hash", in, &hashed)
	var entry struct {
		State     string `json:"state"`
		CreatedAt string `json:"created_at"`
	}
	adminCall(t, p, expiresToken, "GET", "/admin/keys/"+hashed.KeyHash, nil, &entry)
	created, err := time.Parse(time.RFC3339Nano, entry.CreatedAt)
	if entry.State != "completed" || err != nil {
		t.Fatalf("key %s: state %q created_at %q (%v), want a completed record", key, entry.State, entry.CreatedAt, err)
	}
	return created
}

// adminCall sends an admin request with token and decodes its 200 answer.
func adminCall(t *testing.T, p *proxyProc, token, method, path string, body []byte, out any) {
	t.Helper()
	req, err := http.NewRequest(method, p.AdminURL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(res.Body)
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b.String())
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

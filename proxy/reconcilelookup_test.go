package proxy

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A found lookup's answer is recorded as a response is: its headers, and
// its body whole up to max_response_body, past it without its body
// (Idempotent-Body-Omitted), for the first caller and every retry.
func TestFoundAnswerIsRecordedWholeUpToMaxResponseBody(t *testing.T) {
	const answer = `{"status":"succeeded"}` // chargeLedger's lookup
	for _, tc := range []struct {
		name    string
		max     int64
		omitted bool
	}{
		{"as long as max_response_body", int64(len(answer)), false},
		{"a byte past max_response_body", int64(len(answer)) - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &chargeLedger{charges: map[string]bool{}}
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					w.Header().Set("X-Charge-State", "settled")
				}
				l.serve(w, r)
			}, func(o *Options) {
				reviewPolicy(&o.Default)
				o.Default.MaxResponseBody = tc.max
				o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
			})
			first := e.do(t, "POST", "/x", "k1", `{}`)
			retry := e.do(t, "POST", "/x", "k1", `{}`)
			for _, r := range []*response{first, retry} {
				omitted := r.Header.Get("Idempotent-Body-Omitted") == "true"
				if r.Header.Get("X-Charge-State") != "settled" {
					t.Errorf("headers %v, want the lookup's X-Charge-State", r.Header)
				}
				if r.StatusCode != http.StatusOK || omitted != tc.omitted || omitted != (r.body == "") || !omitted && r.body != answer {
					t.Fatalf("%d %q (body omitted: %v), want 200 with the lookup's body omitted: %v", r.StatusCode, r.body, omitted, tc.omitted)
				}
			}
		})
	}
}

// A lookup that fails is logged with its error; one that answers, and the
// deletion of a settled key's marker, log no failure.
func TestSettlementLogsOnlyTheLookupsThatFailed(t *testing.T) {
	var logs lockedBuffer
	var lookups atomic.Int64
	l := &ledger{die: 1, charges: map[string]string{}}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		if lookups.Add(1) == 1 {
			hangUp(w) // the first lookup gets no answer
			return true
		}
		return false
	}
	e := newEnv(t, l.handler, withLog(&logs), func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	// The caller's answer comes once the settlement ended, its marker
	// deleted.
	if r := e.do(t, "POST", "/v1/charges", "k1", `{}`); r.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s, want the found charge", r.StatusCode, r.body)
	}
	failed := logs.lines(t, "lookup of an unknown outcome failed")
	if len(failed) != 1 {
		t.Fatalf("%d lines of a failed lookup, want 1 (of 2 lookups): %v", len(failed), failed)
	}
	if err, _ := failed[0]["error"].(string); err == "" {
		t.Errorf("failed lookup logged without its error: %v", failed[0])
	}
	if lines := logs.lines(t, "could not delete the marker"); len(lines) != 0 {
		t.Errorf("the marker's deletion logged as failed: %v", lines)
	}
}

// A resent HEAD's answer announces a length it does not carry: it is
// recorded, that length kept, and not taken for an answer cut short.
func TestResentHEADAnswerIsRecordedWithItsAnnouncedLength(t *testing.T) {
	var heads atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet: // the lookup: it did not take effect
			http.Error(w, "no such charge", http.StatusNotFound)
		case http.MethodHead:
			if heads.Add(1) == 1 {
				hangUp(w) // the original: its outcome unknown
				return
			}
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(http.StatusOK)
		}
	}, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Methods = []string{http.MethodHead}
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	first := e.do(t, "HEAD", "/x", "k1", "")
	retry := e.do(t, "HEAD", "/x", "k1", "")
	for _, r := range []*response{first, retry} {
		if r.StatusCode != http.StatusOK || r.Header.Get("Content-Length") != "5" {
			t.Fatalf("%d, Content-Length %q: want the resend's 200 announcing 5 bytes", r.StatusCode, r.Header.Get("Content-Length"))
		}
	}
	if n := heads.Load(); n != 2 {
		t.Errorf("%d HEADs upstream, want 2 (the original and one resend)", n)
	}
}

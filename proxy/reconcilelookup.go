package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The upstream calls of a settlement (reconcile.go): the lookup of an
// unknown outcome, and the resend of the original request after an
// absent answer.

// probe sends one lookup and says what its answer means; for a found
// answer it returns the record to keep. It carries the configured headers
// of the original request, never its body, and is bounded by
// reconcile.every (at most upstream.timeout) whatever the upstream does.
func (h *Handler) probe(ctx context.Context, q *request) (string, *store.Record) {
	pol := &q.route.policy
	q.recon.probes.Add(1)
	stop := q.settle.KeepHeld(ctx, &h.settler)
	defer stop()
	pctx, cancel := context.WithTimeout(ctx, min(pol.Reconcile.Every, h.upstreamTimeout))
	defer cancel()
	result, rec, err := h.lookup(pctx, q)
	q.route.metrics.probes[result].Inc()
	if err != nil {
		h.log.Warn("lookup of an unknown outcome failed", "route", q.route.label, "key_hash", q.keyHash, "error", err)
	}
	return result, rec
}

func (h *Handler) lookup(ctx context.Context, q *request) (string, *store.Record, error) {
	pol := &q.route.policy
	up := h.upstream
	base := strings.TrimSuffix(up.EscapedPath(), "/")
	ctx = context.WithValue(ctx, lookupTargetKey{}, base+q.route.probe.target)
	req, err := http.NewRequestWithContext(ctx, q.route.probe.method, up.Scheme+"://"+up.Host+base+q.recon.target, nil)
	if err != nil {
		return probeError, nil, err
	}
	req.Host = q.in.Host
	for _, name := range q.route.probeHeaders {
		// Not one the client's Connection names: the forwarded request
		// did not carry it either.
		if v, ok := q.in.Header[name]; ok && !hopField(q.in.Header, name) {
			req.Header[name] = v
		}
	}
	for _, name := range q.route.probeCookies {
		if c, err := q.in.Cookie(name); err == nil {
			req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
	}
	resp, err := h.transport.RoundTrip(req)
	if err != nil {
		return probeError, nil, err
	}
	defer resp.Body.Close()
	var result string
	switch {
	case slices.Contains(pol.Reconcile.Found, resp.StatusCode):
		result = probeFound
	case slices.Contains(pol.Reconcile.Absent, resp.StatusCode):
		return probeAbsent, nil, nil
	default:
		return probeUnknown, nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, pol.MaxResponseBody+1))
	if err != nil {
		return probeError, nil, err
	}
	return result, foundRecord(resp, body, pol, q.fp), nil
}

type lookupTargetKey struct{}

// LookupTarget is the target of the lookup whose request has context ctx,
// as the route's reconcile.request writes it after the upstream's path,
// its placeholders unfilled; ok is false for any other request. A tracer
// names the lookup by it: the filled target may hold the key, a header's
// value or the body's, which stay out of traces.
func LookupTarget(ctx context.Context) (target string, ok bool) {
	target, ok = ctx.Value(lookupTargetKey{}).(string)
	return target, ok
}

// foundRecord is the record of a found lookup's answer: its headers (not
// those of the upstream's connection, hopField) and body, marked
// Idempotency-Reconciled.
func foundRecord(resp *http.Response, body []byte, pol *Policy, fp store.Fingerprint) *store.Record {
	hdr := make(map[string][]string, len(resp.Header)+2)
	for k, v := range resp.Header {
		if hopField(resp.Header, k) || k == "Content-Length" {
			continue
		}
		hdr[k] = v
	}
	hdr[IdempotencyReconciled] = headerTrue
	rec := &store.Record{Status: resp.StatusCode, Header: hdr, Body: body, Fingerprint: fp,
		CreatedAt: time.Now().Truncate(time.Millisecond)}
	if pol.Reconcile.FoundStatus != 0 {
		rec.Status = pol.Reconcile.FoundStatus
	}
	if int64(len(body)) > pol.MaxResponseBody {
		rec.Body, rec.BodyOmitted = nil, true
	}
	hdr["Content-Length"] = []string{strconv.Itoa(len(rec.Body))}
	return rec
}

// resend forwards q's original request once more, for an absent answer
// under reconcile.resend, and returns its record when it answered. sent
// reports whether it reached the upstream: a resend that did not may be
// tried again, one that did never is. released reports an answer that
// releases a key (release_statuses, the control header's no-store).
func (h *Handler) resend(ctx context.Context, q *request) (rec *store.Record, sent, released bool) {
	// Ownership is proven just before: a proxy that lost the key, or
	// cannot tell, must not execute it again. The marker says it is
	// resent before it is, so that no later owner resends it too.
	if held, _ := q.settle.RenewUnknown(ctx, &h.settler); !held {
		return nil, false, false
	}
	at := h.clock.Now()
	if !h.markResent(ctx, q, at) {
		return nil, false, false
	}
	q.recon.resent = at
	// Renewed while it runs: a resend that outlives lock_ttl must not let
	// another proxy take the key over meanwhile.
	stop := q.settle.KeepHeld(ctx, &h.settler)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, h.maxExecution)
	defer cancel()
	// A capture of its own: the original call's may still be read by
	// the goroutine that ran it.
	c := new(capture)
	h.startCapture(c, discard{hdr: http.Header{}}, q)
	out := q.in.WithContext(httptrace.WithClientTrace(ctx, &c.hooks))
	setBody(out, q.body, nil)
	aborted := h.resendUpstream(c, out)
	putHeader(c.hdr)
	c.hdr = nil
	defer c.freeHeader()
	sent = c.sent.Load()
	h.log.Info("absent upstream outcome: the original request was sent again", "route", q.route.label, "key_hash", q.keyHash, "sent", sent)
	switch {
	case c.upstreamErr != nil || aborted || !c.responseStarted || c.cutShort() || c.ambiguous:
		return nil, sent, false
	case !c.recording:
		// A release status, or the upstream's no-store: nothing
		// recorded, and the key released, as for any request.
		return nil, true, true
	}
	// The record's header is the capture's, pooled: the client that
	// waits for the settlement replays it after the key is settled.
	rec = c.record(q.fp)
	rec.Header = cloneHeader(rec.Header)
	return rec, true, false
}

// resendUpstream runs the reverse proxy for a resend and reports whether
// it panicked (a response cut short).
func (h *Handler) resendUpstream(c *capture, out *http.Request) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
		}
	}()
	h.rp.ServeHTTP(c, out)
	return false
}

func cloneHeader(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// discard is the client of a resend: nobody waits for its bytes.
type discard struct{ hdr http.Header }

func (d discard) Header() http.Header         { return d.hdr }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}

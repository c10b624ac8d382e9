package proxy

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// Reconcile is how a route under on_upstream_error: reconcile settles an
// unknown outcome: the upstream's lookup (Request) and what its answers
// mean. Its keys are the route's reconcile.* (docs/configuration.md).
type Reconcile struct {
	// Request is the lookup, "METHOD /path?query", with placeholders
	// {key}, {json:/pointer}, {header:Name}, {query:name} and {path}
	// filled from the original request.
	Request string `config:"request"`
	// Headers are copied from the original request onto each probe;
	// empty means the route's scope_headers. Nothing else of the original
	// request, and never its body, goes with a probe.
	Headers []string `config:"headers,header"`
	// Found are the lookup's statuses that say the effect happened: the
	// answer is recorded as the key's.
	Found []int `config:"found,status"`
	// FoundStatus, when not 0, is the status recorded for a found answer
	// (201: "as created"); 0 keeps the probe's own.
	FoundStatus int `config:"found_status"`
	// Absent are the lookup's statuses that say it did not happen.
	Absent []int `config:"absent,status"`
	// Resend, on an absent answer, forwards the original request once
	// more (the proxy holds its body); otherwise the key is released.
	Resend bool `config:"resend"`
	// After is the wait before the first probe, so that a request still
	// running upstream finishes first.
	After time.Duration `config:"after"`
	// Every is the wait between probes whose answer was neither found
	// nor absent; it also bounds each probe.
	Every time.Duration `config:"every"`
	// For is how long probing goes on before Then applies.
	For time.Duration `config:"for"`
	// Then is what the key becomes when no probe settled it within For.
	Then ReconcileThen `config:"then"`
}

// DefaultReconcile is the reconcile block a route starts with.
func DefaultReconcile() Reconcile {
	return Reconcile{
		Headers: []string{},
		Found:   []int{200},
		Absent:  []int{404},
		After:   2 * time.Second,
		Every:   2 * time.Second,
		For:     10 * time.Minute,
		Then:    ThenKeep,
	}
}

// ReconcileThen is what a key whose outcome probing could not settle
// becomes; in the configuration, "keep" or "release".
type ReconcileThen uint8

const (
	// ThenKeep records the proxy's 502 upstream-failed, as
	// on_upstream_error: keep does.
	ThenKeep ReconcileThen = iota
	// ThenRelease releases the key: a retry executes again.
	ThenRelease
)

var reconcileThenWords = enum.Words{"keep", "release"}

func (t ReconcileThen) String() string                { return reconcileThenWords.Name(int(t)) }
func (t ReconcileThen) MarshalText() ([]byte, error)  { return []byte(t.String()), nil }
func (t *ReconcileThen) UnmarshalText(b []byte) error { return parseWord(t, reconcileThenWords, b) }

// checkReconcile adds the problems of p's reconcile block and of
// ambiguous_statuses. The block is checked only when the route
// reconciles: an inherited block a route does not use is not an error.
func (c *policyCheck) checkReconcile(p *Policy) {
	c.word("on_upstream_error", upstreamErrorWords, int(p.OnUpstreamError))
	for i, s := range p.AmbiguousStatuses {
		switch {
		case s < 100 || s > 599:
			c.addAt("ambiguous_statuses", i, "invalid HTTP status %d (want 100..599)", s)
		case slices.Contains(p.ReleaseStatuses, s):
			c.addWith("ambiguous_statuses", []string{"release_statuses"},
				"%d is also in release_statuses: a status is either \"not processed\" (release_statuses) or \"unknown\" (ambiguous_statuses); remove it from one", s)
		}
	}
	if p.OnUpstreamError != UpstreamErrorReconcile {
		return
	}
	r := &p.Reconcile
	// A reconcile problem depends on the block and on the choice to use
	// it: a route that sets either reports it.
	also := []string{"reconcile", "on_upstream_error"}
	if _, err := parseProbeTemplate(r.Request); err != nil {
		c.addWith("reconcile.request", also, "%v", err)
	}
	for i, h := range r.Headers {
		if !httpguts.ValidHeaderFieldName(h) {
			c.addWith(fmt.Sprintf("reconcile.headers[%d]", i), also, "invalid header name %q", h)
		}
	}
	c.statuses("reconcile.found", r.Found, also)
	c.statuses("reconcile.absent", r.Absent, also)
	if len(r.Found) == 0 {
		c.addWith("reconcile.found", also, "is empty: list the lookup's statuses that say the request took effect, e.g. [200]")
	}
	for _, s := range r.Found {
		if slices.Contains(r.Absent, s) {
			c.addWith("reconcile.absent", also, "%d is in both found and absent: an answer says one or the other; remove it from one", s)
		}
	}
	if s := r.FoundStatus; s != 0 && (s < 200 || s > 599) {
		c.addWith("reconcile.found_status", also, "invalid HTTP status %d (want 0, the probe's own, or 200..599)", s)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"reconcile.after", r.After}, {"reconcile.every", r.Every}, {"reconcile.for", r.For}} {
		if d.v <= 0 {
			c.addWith(d.key, also, "must be > 0, not %s", c.show(d.key, d.v))
		}
	}
	if r.For > 0 && r.After > r.For {
		c.addWith("reconcile.after", also, "%s exceeds reconcile.for %s: no probe would ever be sent", c.show("reconcile.after", r.After), c.show("reconcile.for", r.For))
	}
	if err := reconcileThenWords.Check(int(r.Then)); err != nil {
		c.addWith("reconcile.then", also, "%v", err)
	}
}

// statuses reports the entries of a status list outside 100..599.
func (c *policyCheck) statuses(key string, list []int, also []string) {
	for i, s := range list {
		if s < 100 || s > 599 {
			c.addWith(fmt.Sprintf("%s[%d]", key, i), also, "invalid HTTP status %d (want 100..599)", s)
		}
	}
}

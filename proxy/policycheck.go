package proxy

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// PolicyProblem is one value of a Policy the handler cannot run.
type PolicyProblem struct {
	// Key is the configuration key at fault: "lock_ttl", "methods[1]".
	Key string
	// Reason says what is wrong with it.
	Reason string
	// Keys are every key whose value the reason depends on, Key's own
	// (without an index) first: ["lock_ttl", "ttl"].
	Keys []string
}

func (p PolicyProblem) Error() string { return p.Key + ": " + p.Reason }

// Check returns every reason the handler cannot run p, each naming the key
// at fault. It is the one validation of a policy: package config reports its
// problems under their key paths, New refuses a policy that has any.
//
// from may be nil. Otherwise it says where the value of a key came from
// ("from defaults", "built-in default", ""), and a reason that quotes the
// value says so too: "30s (from defaults) exceeds ttl 5s".
func (p Policy) Check(from func(key string) string) []PolicyProblem {
	c := &policyCheck{from: from}
	switch {
	case len(p.KeySources) > 0 && p.Header != "":
		c.addWith("key_sources", []string{"header"}, "set header or key_sources, not both (header: NAME is the shorthand for key_sources: [header:NAME])")
	case len(p.KeySources) == 0 && !httpguts.ValidHeaderFieldName(p.Header):
		c.add("header", "invalid header name %q", p.Header)
	}
	for i, k := range p.KeySources {
		if err := k.check(); err != nil {
			c.addAt("key_sources", i, "%v", err)
		}
	}
	for i, m := range p.Methods {
		if !httpguts.ValidHeaderFieldName(m) {
			c.addAt("methods", i, "invalid method %q", m)
		}
	}
	if p.TTL <= 0 {
		c.add("ttl", "must be > 0, not %s", c.show("ttl", p.TTL))
	}
	for _, k := range slices.Sorted(maps.Keys(p.StatusTTL)) {
		key := "status_ttl." + k
		if reason := checkStatusKey(k); reason != "" {
			c.addWith(key, []string{"status_ttl"}, "%s", reason)
		} else if d := p.StatusTTL[k]; d <= 0 {
			c.addWith(key, []string{"status_ttl"}, "must be > 0, not %s", c.show(key, d))
		}
	}
	switch {
	case p.LockTTL <= 0:
		c.add("lock_ttl", "must be > 0, not %s", c.show("lock_ttl", p.LockTTL))
	case p.TTL > 0 && p.LockTTL > p.TTL:
		c.addWith("lock_ttl", []string{"ttl"}, "%s exceeds ttl %s: lower lock_ttl or raise ttl", c.show("lock_ttl", p.LockTTL), c.show("ttl", p.TTL))
	}
	c.word("concurrent", concurrencyWords, int(p.Concurrent))
	switch {
	case p.WaitTimeout < 0:
		c.add("wait_timeout", "must not be negative (%s)", c.show("wait_timeout", p.WaitTimeout))
	case p.WaitTimeout == 0 && p.Concurrent == ConcurrentWait:
		c.addWith("wait_timeout", []string{"concurrent"}, "must be > 0 when concurrent is %s", c.show("concurrent", p.Concurrent))
	}
	for i, s := range p.ReleaseStatuses {
		if s < 100 || s > 599 {
			c.addAt("release_statuses", i, "invalid HTTP status %d (want 100..599)", s)
		}
	}
	for i, code := range p.ReleaseGRPCStatuses {
		if code == grpcwire.OK || code > grpcwire.Unauthenticated {
			c.addAt("release_grpc_statuses", i, "%s cannot be released: OK is an answer, and only codes 1..16 exist", code)
		}
	}
	if p.MaxRequestBody <= 0 {
		c.add("max_request_body", "must be > 0, not %s", c.show("max_request_body", p.MaxRequestBody))
	}
	if p.MaxResponseBody < 0 {
		c.add("max_response_body", "must not be negative")
	}
	for i, s := range p.ScopeHeaders {
		if err := s.check(); err != nil {
			c.addAt("scope_headers", i, "%v", err)
		}
	}
	c.headers("fingerprint_headers", p.FingerprintHeaders)
	c.headers("replay_exclude_headers", p.ReplayExcludeHeaders)
	c.word("fingerprint_json", fingerprintJSONWords, int(p.FingerprintJSON))
	if len(p.FingerprintIgnore) > maxFingerprintIgnore {
		c.add("fingerprint_ignore", "%d pointers: at most %d", len(p.FingerprintIgnore), maxFingerprintIgnore)
	}
	for i, ptr := range p.FingerprintIgnore {
		if err := checkFingerprintIgnore([]jsonread.Pointer{ptr}); err != nil {
			c.addAt("fingerprint_ignore", i, "%v", err)
		}
	}
	c.word("expired_keys", expiredWords, int(p.ExpiredKeys))
	if p.ExpiredKeyWindow <= 0 && p.ExpiredKeys == ExpiredReject {
		c.addWith("expired_key_window", []string{"expired_keys"}, "must be > 0 when expired_keys is reject, not %s", c.show("expired_key_window", p.ExpiredKeyWindow))
	}
	c.word("ambiguous_paths", ambiguousWords, int(p.AmbiguousPaths))
	c.word("path_case", pathCaseWords, int(p.PathCase))
	c.word("trailing_slash", trailingSlashWords, int(p.TrailingSlash))
	c.word("mode", modeWords, int(p.Mode))
	if p.ChurnWindow < 0 {
		c.add("churn_window", "must not be negative (%s)", c.show("churn_window", p.ChurnWindow))
	}
	if p.ChurnMaxEntries < 2 && p.ChurnWindow > 0 {
		c.addWith("churn_max_entries", []string{"churn_window"}, "must be at least 2 when churn_window is set, not %d", p.ChurnMaxEntries)
	}
	c.word("async", asyncWords, int(p.Async))
	if err := CheckUpstreamControlHeader(p.UpstreamControlHeader); err != nil {
		c.add("upstream_control_header", "%v", err)
	}
	c.checkReconcile(&p)
	return c.out
}

// checkErr is Check as one error, for New and SetRoutes.
func (p Policy) checkErr(label string) error {
	problems := p.Check(nil)
	if len(problems) == 0 {
		return nil
	}
	errs := make([]error, len(problems))
	for i, pr := range problems {
		errs[i] = fmt.Errorf("route %s: %w", label, pr)
	}
	return errors.Join(errs...)
}

type policyCheck struct {
	from func(key string) string
	out  []PolicyProblem
}

// word reports a value of an enumeration, built in code, that has no word.
func (c *policyCheck) word(key string, words enum.Words, v int) {
	if err := words.Check(v); err != nil {
		c.add(key, "%v", err)
	}
}

func (c *policyCheck) add(key, format string, args ...any) {
	c.addWith(key, nil, format, args...)
}

// addWith reports key, whose reason also depends on the keys in also.
func (c *policyCheck) addWith(key string, also []string, format string, args ...any) {
	c.out = append(c.out, PolicyProblem{
		Key:    key,
		Reason: fmt.Sprintf(format, args...),
		Keys:   append([]string{key}, also...),
	})
}

func (c *policyCheck) addAt(key string, i int, format string, args ...any) {
	c.out = append(c.out, PolicyProblem{
		Key:    fmt.Sprintf("%s[%d]", key, i),
		Reason: fmt.Sprintf(format, args...),
		Keys:   []string{key},
	})
}

func (c *policyCheck) headers(key string, names []string) {
	for i, h := range names {
		if !httpguts.ValidHeaderFieldName(h) {
			c.addAt(key, i, "invalid header name %q", h)
		}
	}
}

// show formats the value of key for a reason, with where it came from.
func (c *policyCheck) show(key string, v any) string {
	s := fmt.Sprint(v)
	if c.from != nil {
		if origin := c.from(key); origin != "" {
			s += " (" + origin + ")"
		}
	}
	return s
}

package config

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// Validate checks the semantic rules (ranges, words, combinations, route
// patterns) of a Config built in code. Load runs the same checks itself.
// It returns errors.Join of *Problem values.
func (c *Config) Validate() error {
	ps := c.problems(nil)
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// validation collects semantic problems. origins, when known, say where a
// value came from ("from IDEMPOTENCY_PROXY_LISTEN"); a problem with such a
// value says so.
type validation struct {
	origins map[string]string
	out     []*Problem
}

func (v *validation) add(path, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	if o := v.origins[path]; o != "" {
		reason += " (" + o + ")"
	}
	v.out = append(v.out, &Problem{Path: path, Reason: reason})
}

// problems returns every semantic problem in file order. origins are the
// paths Load's layers set (nil for a Config built in code).
func (c *Config) problems(origins map[string]string) []*Problem {
	v := &validation{origins: origins}
	if c.Listen == "" {
		v.add("listen", "required: set it with %s (host:port, e.g. :8080)", setWith("listen"))
	} else {
		checkAddr(v, "listen", c.Listen)
	}
	if c.AdminListen == "" {
		v.add("admin_listen", "required: set it with %s (host:port, e.g. :9090)", setWith("admin_listen"))
	} else {
		checkAddr(v, "admin_listen", c.AdminListen)
	}
	if c.Listen == c.AdminListen && c.Listen != "" && !strings.HasSuffix(c.Listen, ":0") {
		v.add("admin_listen", "same address as listen (%s)", c.Listen)
	}
	if c.ShutdownTimeout <= 0 {
		v.add("shutdown_timeout", "must be > 0, not %s", c.ShutdownTimeout)
	}
	checkUpstream(v, c.Upstream)
	checkStore(v, c.Store)
	c.Store.Encryption.load(v)
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		// The token most often comes from the environment, exported for
		// the keys command: name the variable, or it is hard to find.
		token := "admin.token"
		if o := v.origins["admin.token"]; o != "" {
			token += " (" + o + ")"
		}
		v.add("admin.token_file", "set %s or admin.token_file, not both", token)
	}
	// A blank token is none: admin.Token ignores surrounding whitespace.
	if c.Admin.PProf && strings.TrimSpace(c.Admin.Token) == "" && c.Admin.TokenFile == "" && !loopback(c.AdminListen) {
		v.add("admin.pprof", "true without admin.token or admin.token_file serves profiles, and the command line, to anyone who reaches admin_listen %q: set admin.token (or admin.token_file), or bind admin_listen to a loopback address such as 127.0.0.1:9090", c.AdminListen)
	}
	c.checkPolicies(v)
	c.checkAsync(v)
	matches := make([]string, len(c.Routes))
	insensitive := make([]bool, len(c.Routes))
	for i, r := range c.Routes {
		matches[i] = r.Match
		insensitive[i] = r.PathCase == proxy.PathCaseInsensitive
	}
	problems := proxy.CheckPatterns(matches)
	if len(problems) == 0 {
		problems = proxy.CheckPatternCase(matches, insensitive)
	}
	for _, p := range problems {
		v.add(fmt.Sprintf("routes[%d].match", p.Index), "%s", p.Reason)
	}
	if len(problems) == 0 {
		c.checkRouteMethods(v)
	}
	return v.out
}

// checkRouteMethods refuses an enabled route whose match names a method its
// methods do not protect: it matches only requests of that method and
// would pass every one through, require_key or not. The problem is the
// route's methods when it sets them, else its match (the methods are the
// defaults').
func (c *Config) checkRouteMethods(v *validation) {
	for i, r := range c.Routes {
		m := proxy.UnprotectedMethod(r.Match, r.Methods)
		if !r.Enabled || m == "" {
			continue
		}
		key, methods := fmt.Sprintf("routes[%d].methods", i), fmt.Sprint(r.Methods)
		if _, set := v.origins[key]; v.origins != nil && !set {
			key, methods = fmt.Sprintf("routes[%d].match", i), methods+" (from defaults)"
		}
		v.add(key, "route %q matches %s requests alone, and its methods %s protect none: add %s to its methods, or set enabled: false for a plain pass-through", r.Match, m, methods, m)
	}
}

// checkPolicies runs the handler's own check on the defaults and on every
// route. A route's problem that involves only values it inherited was
// reported once, at defaults; one that involves an inherited value says
// where that value came from: "30s (from defaults) exceeds ttl 5s".
func (c *Config) checkPolicies(v *validation) {
	from := func(prefix, unset string) func(string) string {
		return func(key string) string {
			if v.origins == nil {
				return ""
			}
			if o, ok := v.origins[prefix+"."+key]; ok {
				return o
			}
			return unset
		}
	}
	for _, p := range c.Defaults.Check(from("defaults", "built-in default")) {
		v.out = append(v.out, &Problem{Path: "defaults." + p.Key, Reason: p.Reason})
	}
	for i, r := range c.Routes {
		prefix := fmt.Sprintf("routes[%d]", i)
		for _, p := range r.Policy.Check(from(prefix, "from defaults")) {
			if !inherited(p.Keys, r.Policy, c.Defaults) {
				v.out = append(v.out, &Problem{Path: prefix + "." + p.Key, Reason: p.Reason})
			}
		}
	}
}

// inherited reports whether route has the defaults' value for every key.
func inherited(keys []string, route, defaults Policy) bool {
	r, d := reflect.ValueOf(route), reflect.ValueOf(defaults)
	for _, f := range fieldsOf(r.Type()) {
		if slices.Contains(keys, f.key) && !reflect.DeepEqual(r.FieldByIndex(f.index).Interface(), d.FieldByIndex(f.index).Interface()) {
			return false
		}
	}
	return true
}

// loopback reports whether addr (host:port) listens on a loopback address
// only: 127.0.0.0/8, ::1 or localhost. An empty host listens on every
// interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkAddr(v *validation, key, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(key, "invalid address %q (want host:port, e.g. :8080)", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(key, "invalid port %q", port)
	}
}

func checkUpstream(v *validation, u Upstream) {
	switch {
	case u.URL == nil:
		v.add("upstream.url", "required: set it with %s (e.g. http://127.0.0.1:3000)", setWith("upstream.url"))
	case u.URL.Scheme != "http" && u.URL.Scheme != "https":
		v.add("upstream.url", "scheme must be http or https, not %q%s", u.URL.Scheme, schemeHint(u.URL.String()))
	case u.URL.Host == "":
		v.add("upstream.url", "missing host in %q", u.URL.Redacted())
	}
	if u.Timeout <= 0 {
		v.add("upstream.timeout", "must be > 0, not %s", u.Timeout)
	} else if u.MaxExecution < u.Timeout {
		v.add("upstream.max_execution", "must be at least upstream.timeout (%s), not %s: a call must be allowed to run as long as its client waits", u.Timeout, u.MaxExecution)
	}
	if u.MaxDetached <= 0 {
		v.add("upstream.max_detached", "must be > 0, not %d", u.MaxDetached)
	}
	if u.MaxDetachedBytes <= 0 {
		v.add("upstream.max_detached_bytes", "must be > 0, not %d", u.MaxDetachedBytes)
	}
}

// minAsyncSecret is the shortest async_secret accepted, in bytes.
const minAsyncSecret = 16

// checkAsync checks async_path, and that a route answering 202 under
// Prefer: respond-async has a secret to sign its status URLs with.
func (c *Config) checkAsync(v *validation) {
	p := c.AsyncPath
	if len(p) < 2 || !strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/") || strings.ContainsAny(p, "?#") {
		v.add("async_path", "must be a path starting and ending with \"/\", such as %q, not %q", proxy.DefaultAsyncPath, p)
	}
	var allow string
	if c.Defaults.Async == proxy.AsyncAllow {
		allow = "defaults.async"
	}
	for i, r := range c.Routes {
		if allow == "" && r.Enabled && r.Async == proxy.AsyncAllow {
			allow = fmt.Sprintf("routes[%d].async", i)
		}
	}
	if c.AsyncSecret != "" {
		// Status URLs are served, before any route, by the prefix alone:
		// a route under it would have every request taken for a poll.
		for i, r := range c.Routes {
			path, prefix := proxy.PatternPath(r.Match), p
			if r.PathCase == proxy.PathCaseInsensitive {
				path, prefix = strings.ToLower(path), strings.ToLower(prefix)
			}
			if prefix != "" && strings.HasPrefix(path, prefix) {
				v.add("async_path", "%q would take the requests of routes[%d] (%q) for status polls and answer them 404: choose a prefix no route's path starts with, such as %q", p, i, r.Match, proxy.DefaultAsyncPath)
			}
		}
	}
	switch {
	case allow != "" && c.AsyncSecret == "":
		v.add("async_secret", "required by %s: allow; set at least %d random bytes, the same on every replica (e.g. IDEMPOTENCY_PROXY_ASYNC_SECRET=$(openssl rand -hex 32))", allow, minAsyncSecret)
	case c.AsyncSecret != "" && len(c.AsyncSecret) < minAsyncSecret:
		v.add("async_secret", "must be at least %d bytes, not %d: status URLs signed with it must not be guessable (e.g. openssl rand -hex 32)", minAsyncSecret, len(c.AsyncSecret))
	}
}

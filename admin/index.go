package admin

import (
	"fmt"
	"html"
	"net/http"
	"strings"
)

// endpoint is one line of the admin listener's index.
type endpoint struct {
	request string // "GET /readyz"
	what    string
	token   bool // needs Authorization: Bearer TOKEN
	keyAPI  bool // served only with a token set
	pprof   bool // served only with pprof on
}

// endpoints are what the admin listener serves, in the order an operator
// reaches for them; docs/operating.md has each in full.
var endpoints = []endpoint{
	{request: "GET /healthz", what: "200 while the process runs (liveness)"},
	{request: "GET /readyz", what: "200 while the store answers, 503 with the reason otherwise (readiness)"},
	{request: "GET /metrics", what: "Prometheus metrics"},
	{request: "GET /admin/keys?state=in_flight|completed|all&limit=N&cursor=C", what: "list the keys in the store", token: true, keyAPI: true},
	{request: "GET /admin/keys?key=RAW&limit=N&cursor=C", what: "find the records of a raw idempotency key in every scope, a page of the store at a time", token: true, keyAPI: true},
	{request: "GET /admin/keys/{key_hash}", what: "the lease (who holds it, since when) or the record under a key_hash", token: true, keyAPI: true},
	{request: "DELETE /admin/keys/{key_hash}", what: "remove a lease or a record", token: true, keyAPI: true},
	{request: "POST /admin/hash", what: "the key_hash a request with a given key would use", token: true, keyAPI: true},
	{request: "GET /admin/config", what: "the effective configuration as YAML, each value's origin, secrets masked", token: true, keyAPI: true},
	{request: "GET /admin/report?window=24h", what: "the adoption report: per route, requests, keyed share, duplicates and the upstream executions they saved or would save, mismatches, conflicts, missing keys, key churn; this process's counts only", token: true, keyAPI: true},
	{request: "GET /debug/pprof/", what: "Go runtime profiles", token: true, pprof: true},
}

// state says whether e is served here and what it needs.
func (h *Handler) state(e endpoint) string {
	switch {
	case e.keyAPI && !h.token.Enabled():
		return "off: set admin.token or admin.token_file"
	case e.pprof && !h.opts.PProf:
		return "off: set admin.pprof"
	case e.token && h.token.Enabled():
		return "needs the admin token"
	case e.token:
		return "open: no admin token is set"
	}
	return "open"
}

// serveIndex answers the admin listener's root, what an operator opens
// first: every endpoint, what it is and whether it needs the token. HTML
// for a browser, plain text for curl.
func (h *Handler) serveIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "idempotency-proxy admin listener (docs/operating.md)\n\n")
		for _, e := range endpoints {
			fmt.Fprintf(w, "%s\n    %s [%s]\n", e.request, e.what, h.state(e))
		}
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	b.WriteString("<!doctype html>\n<meta charset=\"utf-8\">\n<title>idempotency-proxy admin</title>\n")
	b.WriteString("<h1>idempotency-proxy admin listener</h1>\n<p>Every endpoint is described in docs/operating.md.</p>\n")
	b.WriteString("<table>\n<tr><th>request</th><th>what</th><th>access</th></tr>\n")
	for _, e := range endpoints {
		link := html.EscapeString(e.request)
		if method, path, _ := strings.Cut(e.request, " "); method == "GET" && !strings.ContainsAny(path, "{?") {
			link = method + ` <a href="` + html.EscapeString(path) + `">` + html.EscapeString(path) + "</a>"
		}
		fmt.Fprintf(&b, "<tr><td><code>%s</code></td><td>%s</td><td>%s</td></tr>\n", link, html.EscapeString(e.what), html.EscapeString(h.state(e)))
	}
	b.WriteString("</table>\n")
	w.Write([]byte(b.String()))
}

package admin

import (
	"net/http"
	"net/http/pprof"
)

// routePProf serves net/http/pprof under /debug/pprof/ on mux (never on
// http.DefaultServeMux), behind the token when one is set.
func routePProf(mux *http.ServeMux, t *Token) {
	guard := func(next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if t.Enabled() && !t.allows(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="idempotency-proxy admin"`)
				writeProblem(w, probUnauthorized, "Send the admin token as Authorization: Bearer TOKEN.")
				return
			}
			next(w, r)
		}
	}
	mux.HandleFunc("/debug/pprof/", guard(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", guard(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", guard(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", guard(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", guard(pprof.Trace))
}

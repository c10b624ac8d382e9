package admin

import (
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
)

// routePProf serves net/http/pprof under /debug/pprof/ on mux (never on
// http.DefaultServeMux), behind the token when one is set. The
// configuration accepts pprof without a token only on a loopback
// admin_listen.
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
	mux.HandleFunc("/debug/pprof/cmdline", guard(cmdline))
	mux.HandleFunc("/debug/pprof/profile", guard(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", guard(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", guard(pprof.Trace))
}

// cmdline is pprof.Cmdline with credentials masked: the arguments,
// NUL-separated, with the password of every URL in them (--redis-url,
// --postgres-url) shown as the logs show it.
func cmdline(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = maskArg(a)
	}
	w.Write([]byte(strings.Join(args, "\x00")))
}

// maskArg is a command-line argument with the password of a URL in it
// masked by url.URL.Redacted, as log lines, /readyz and --check mask it:
// "redis://:s3cret@host/0" and "--redis-url=redis://u:s3cret@host" keep
// everything but the password. Other arguments are returned as they are.
func maskArg(a string) string {
	prefix := ""
	if strings.HasPrefix(a, "-") {
		i := strings.IndexByte(a, '=')
		if i < 0 {
			return a
		}
		prefix, a = a[:i+1], a[i+1:]
	}
	if !strings.Contains(a, "://") {
		return prefix + a
	}
	u, err := url.Parse(a)
	if err != nil {
		// Not a URL Go can read, so no password can be told from the
		// rest: show none of it.
		return prefix + "[redacted]"
	}
	if _, ok := u.User.Password(); !ok {
		return prefix + a
	}
	return prefix + u.Redacted()
}

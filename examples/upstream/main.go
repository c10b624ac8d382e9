// Command upstream is the demo service of the README's quick start: a
// stand-in for an API that is not idempotent. Every request it receives is
// one execution: it answers with a JSON body carrying the execution's number
// (a counter of this process) and logs the execution on stderr, so a
// response the proxy replayed is visible as a repeated number and a missing
// log line.
//
//	go run ./examples/upstream                   # listens on :3000
//	go run ./examples/upstream --listen 127.0.0.1:3001
//	go run ./examples/upstream --site . --delay 3s   # the checkout example
//
// With --site (the repository root) it also serves the checkout example's
// page (examples/checkout/) and the browser client it uses (clients/js/), so
// the page and the API it calls share the proxy's origin; those GETs are not
// executions. --delay makes every execution take that long, like a payment
// provider: long enough to click twice, reload or drop the network mid-charge.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// maxBody bounds how much of a request body is read and echoed.
const maxBody = 64 << 10

// execution is the body of every answer.
type execution struct {
	Execution int64  `json:"execution"` // 1 for the first request this process served
	Method    string `json:"method"`
	Path      string `json:"path"`
	Body      string `json:"body,omitempty"` // the request body, echoed
	Time      string `json:"time"`           // when it executed; a replay repeats it
}

func main() {
	listen := flag.String("listen", ":3000", "listen `address`")
	site := flag.String("site", "", "serve examples/checkout/ and clients/js/ from this repository root `directory`")
	delay := flag.Duration("delay", 0, "how long each execution takes")
	flag.Parse()
	log.SetPrefix("upstream: ")

	var h http.Handler = handler(*delay)
	if *site != "" {
		h = withSite(*site, h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	// Logged once bound, so whoever waits for this line can send requests.
	log.Printf("listening on %s", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
		os.Exit(1)
	}
}

// sitePaths are the repository's directories --site serves, as URL paths.
var sitePaths = []string{"/examples/checkout/", "/clients/js/"}

// withSite serves GET and HEAD under sitePaths from the files of root, and
// hands every other request to next.
func withSite(root string, next http.Handler) http.Handler {
	files := http.FileServer(http.Dir(root))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			for _, p := range sitePaths {
				if strings.HasPrefix(r.URL.Path, p) {
					// Always the current files: the example is edited live.
					w.Header().Set("Cache-Control", "no-store")
					if strings.HasSuffix(r.URL.Path, ".md") {
						// The page links its README: a browser shows
						// text/plain, but downloads text/markdown.
						w.Header().Set("Content-Type", "text/plain; charset=utf-8")
					}
					files.ServeHTTP(w, r)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func handler(delay time.Duration) http.Handler {
	var executions atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		n := executions.Add(1)
		log.Printf("execution %d: %s %s (Idempotency-Key: %q)", n, r.Method, r.URL.RequestURI(), r.Header.Get("Idempotency-Key"))
		// A slow API runs on when its caller goes away: the request's
		// context is not watched.
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		out, _ := json.Marshal(execution{
			Execution: n,
			Method:    r.Method,
			Path:      r.URL.RequestURI(),
			Body:      string(body),
			Time:      time.Now().UTC().Format(time.RFC3339Nano),
		})
		fmt.Fprintf(w, "%s\n", out)
	})
}

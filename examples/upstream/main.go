// Command upstream is the demo service of the README's quick start: a
// stand-in for an API that is not idempotent. Every request it receives is
// one execution: it answers with a JSON body carrying the execution's number
// (a counter of this process) and logs the execution on stderr, so a
// response the proxy replayed is visible as a repeated number and a missing
// log line.
//
//	go run ./examples/upstream                   # listens on :3000
//	go run ./examples/upstream --listen 127.0.0.1:3001
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
	flag.Parse()
	log.SetPrefix("upstream: ")

	srv := &http.Server{Handler: handler(), ReadHeaderTimeout: 10 * time.Second}
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

func handler() http.Handler {
	var executions atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		n := executions.Add(1)
		log.Printf("execution %d: %s %s (Idempotency-Key: %q)", n, r.Method, r.URL.RequestURI(), r.Header.Get("Idempotency-Key"))
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

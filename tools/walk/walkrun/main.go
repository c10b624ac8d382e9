// Command walkrun is the program tools/walk builds against an instrumented
// copy of the module: it serves a keyed POST through the proxy on the
// memory store to a local upstream (a miss), the same request again (a
// replay) and one without a key, and prints the functions each ran
// (walkprobe's events), a line each:
//
//	request	miss	201
//	enter	7	proxy/handler.go	(*Handler).ServeHTTP
//	exit	7	github.com/…/proxy/handler.go	github.com/…/proxy.(*Handler).serveKeyed
//
// A request's walk starts as its ServeHTTP is entered, and ends when the
// client has the response and the handler has settled its key (Wait), so
// it holds the goroutines the request started too. Starting the proxy and
// the store is left out, and so is a first miss and replay with another
// key: one-time work (pools, the first connection) is not the walk.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/tools/walk/walkprobe"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "walkrun:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","amount":100}`)
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	if err != nil {
		return err
	}
	// The store's expiry sweeper runs on a goroutine of its own, no
	// request's: an hour apart, it never visits during a walk.
	st := memory.New(memory.Options{SweepInterval: time.Hour})
	defer st.Close()
	h, err := proxy.New(proxy.Options{Upstream: u, Store: st})
	if err != nil {
		return err
	}
	var recording atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if recording.Load() {
			walkprobe.Start()
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	for _, req := range []struct{ name, key string }{
		{"warm-up", "walk-0"}, {"warm-up", "walk-0"},
		{"miss", "walk-1"}, {"hit", "walk-1"}, {"no-key", ""},
	} {
		recording.Store(req.name != "warm-up")
		status, err := send(srv.URL, req.key)
		if err != nil {
			return fmt.Errorf("%s: %w", req.name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = h.Wait(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: the key was not settled: %w", req.name, err)
		}
		events := walkprobe.Stop()
		if !recording.Load() {
			continue
		}
		fmt.Fprintf(out, "request\t%s\t%d\n", req.name, status)
		for _, e := range events {
			kind := "enter"
			if e.Exit {
				kind = "exit"
			}
			fmt.Fprintf(out, "%s\t%d\t%s\t%s\n", kind, e.Goroutine, e.File, e.Func)
		}
	}
	return nil
}

// send posts a JSON body with key (none when empty) and returns the status.
func send(base, key string) (int, error) {
	r, err := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(`{"amount":100,"currency":"eur"}`))
	if err != nil {
		return 0, err
	}
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// Command fiberpeer is the load benchmark's peer (bench/loadbench
// --peers fiber): Fiber v3's idempotency middleware in front of its proxy
// middleware, on Fiber's in-memory storage or on Redis through
// gofiber/storage/redis. It is configured as an operator would configure it
// for the benchmark's traffic: the Idempotency-Key header, keys of 1 to 255
// bytes (Fiber's default accepts only 36-byte UUIDs).
//
// It lives in its own main package so that only the benchmark links Fiber:
// the idempotency-proxy binary does not.
//
//	fiberpeer --listen 127.0.0.1:8080 --admin-listen 127.0.0.1:8081 \
//	    --upstream http://127.0.0.1:9000 [--redis-url redis://127.0.0.1:6380/2]
//
// The admin listener, plain net/http, answers /ready, /gomaxprocs and
// /debug/pprof/profile, the endpoints loadbench asks of every child.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/gofiber/fiber/v3/middleware/proxy"
	"github.com/gofiber/storage/redis/v3"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fiberpeer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fiberpeer", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address of the proxy")
	adminListen := fs.String("admin-listen", "", "address of /ready, /gomaxprocs and /debug/pprof/profile (none if empty)")
	upstream := fs.String("upstream", "", "upstream URL (http://host:port)")
	redisURL := fs.String("redis-url", "", "Redis URL of the idempotency storage; empty: Fiber's in-memory storage")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *upstream == "" {
		return errors.New("--upstream is required")
	}
	app, err := newApp(*upstream, *redisURL)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *adminListen != "" {
		aln, err := net.Listen("tcp", *adminListen)
		if err != nil {
			return err
		}
		go func() { _ = (&http.Server{Handler: adminMux(), ReadHeaderTimeout: 10 * time.Second}).Serve(aln) }()
	}
	return app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
}

// maxKeyLen is the longest Idempotency-Key accepted, as the
// idempotency-proxy's default.
const maxKeyLen = 255

// validKey accepts keys of 1 to maxKeyLen bytes.
func validKey(k string) error {
	if len(k) < 1 || len(k) > maxKeyLen {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", idempotency.ErrInvalidIdempotencyKey, len(k), maxKeyLen)
	}
	return nil
}

// newApp builds the peer: a replay marker, the idempotency middleware, and
// the proxy middleware forwarding to upstream.
func newApp(upstream, redisURL string) (*fiber.App, error) {
	cfg := idempotency.Config{
		KeyHeader:         "Idempotency-Key",
		KeyHeaderValidate: validKey,
		Lifetime:          24 * time.Hour,
	}
	if redisURL != "" {
		st, err := newRedisStorage(redisURL)
		if err != nil {
			return nil, err
		}
		cfg.Storage = st
	}
	app := fiber.New()
	app.Use(markReplays, idempotency.New(cfg), proxy.Balancer(proxy.Config{Servers: []string{upstream}}))
	return app, nil
}

// newRedisStorage opens gofiber/storage/redis, which panics on a bad URL
// or an unreachable server: here that is an error.
func newRedisStorage(url string) (st *redis.Storage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("redis storage %s: %v", url, r)
		}
	}()
	return redis.New(redis.Config{URL: url}), nil
}

// markReplays sets Idempotent-Replayed: true on a response the
// idempotency middleware served from its storage, as the idempotency-proxy
// does, so the load generator can check every request took the path its
// scenario names. Fiber itself marks nothing.
func markReplays(c fiber.Ctx) error {
	err := c.Next()
	if idempotency.IsFromCache(c) {
		c.Set("Idempotent-Replayed", "true")
	}
	return err
}

func adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /gomaxprocs", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.Itoa(runtime.GOMAXPROCS(0)))
	})
	return mux
}

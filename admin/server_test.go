package admin

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPProfIsOffByDefault(t *testing.T) {
	e := newEnv(t, "")
	if rec := e.do(t, "GET", "/debug/pprof/", "", ""); rec.Code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without admin.pprof = %d, want 404", rec.Code)
	}
}

func TestPProfIsBehindTheTokenWhenOneIsSet(t *testing.T) {
	pprofOn := func(o *Options) { o.PProf = true }
	open := newEnv(t, "", pprofOn)
	if rec := open.do(t, "GET", "/debug/pprof/goroutine?debug=1", "", ""); rec.Code != http.StatusOK {
		t.Errorf("pprof without a token configured = %d, want 200", rec.Code)
	}
	guarded := newEnv(t, testToken, pprofOn)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/pprof/symbol"} {
		if rec := guarded.do(t, "GET", path, "", ""); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s without the token = %d, want 401", path, rec.Code)
		}
	}
	if rec := guarded.do(t, "GET", "/debug/pprof/heap", bearer, ""); rec.Code != http.StatusOK {
		t.Errorf("pprof with the token = %d, want 200", rec.Code)
	}
}

// Scrapers and probes leave keep-alive connections behind; the admin server
// must close the idle ones, and drop a client that never finishes its header.
func TestAdminServerClosesIdleAndStalledConnections(t *testing.T) {
	srv := NewServer(New(Options{Store: pingOnly{}}), nil)
	if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 || srv.IdleTimeout > 2*time.Minute {
		t.Fatalf("ReadHeaderTimeout %v, IdleTimeout %v: want both set, idle at most 2m", srv.ReadHeaderTimeout, srv.IdleTimeout)
	}
	// The same server with timeouts short enough to watch them work.
	srv.IdleTimeout, srv.ReadHeaderTimeout = 50*time.Millisecond, 50*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	const n = 50
	conns := make([]net.Conn, 0, n+1)
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusOK || res.Close {
			t.Fatalf("keep-alive request: %v %v", res, err)
		}
		conns = append(conns, c)
	}
	stalled, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stalled.Close() })
	io.WriteString(stalled, "GET /healthz HTTP/1.1\r\nHost: adm")
	conns = append(conns, stalled)

	// Each connection must be closed by the server: a read ends (EOF, or
	// the 408 a stalled header gets) long before the generous deadline.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		rest, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection %d still open: the server does not close idle or stalled connections", i)
		}
		if i == n && len(rest) > 0 && !strings.Contains(string(rest), "408") {
			t.Errorf("stalled header got %q", rest)
		}
	}
}

// /debug/pprof/cmdline shows the command line with every URL's password
// masked, as the logs mask it; the rest of each argument is kept.
func TestPProfCmdlineMasksCredentials(t *testing.T) {
	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = []string{"idempotency-proxy", "--redis-url", "redis://:s3cret@10.0.0.1:6379/0",
		"--postgres-url=postgres://app:pa55@db:5432/idem?sslmode=disable", "--upstream", "http://user@127.0.0.1:3000",
		"--listen=:8080", "rediss://%zz:hunter2@bad"}
	e := newEnv(t, "", func(o *Options) { o.PProf = true })
	rec := e.do(t, "GET", "/debug/pprof/cmdline", "", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("cmdline = %d", rec.Code)
	}
	got := strings.Split(rec.Body.String(), "\x00")
	want := []string{"idempotency-proxy", "--redis-url", "redis://:xxxxx@10.0.0.1:6379/0",
		"--postgres-url=postgres://app:xxxxx@db:5432/idem?sslmode=disable", "--upstream", "http://user@127.0.0.1:3000",
		"--listen=:8080", "[redacted]"}
	if !slices.Equal(got, want) {
		t.Errorf("cmdline =\n%q\nwant\n%q", got, want)
	}
	for _, secret := range []string{"s3cret", "pa55", "hunter2"} {
		if strings.Contains(rec.Body.String(), secret) {
			t.Errorf("cmdline shows %q", secret)
		}
	}
}

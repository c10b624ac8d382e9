// Package pgtest starts real PostgreSQL servers for tests: initdb and
// postgres from BinDir, as the OS user postgres when the tests run as root
// (PostgreSQL refuses to run as root), in a temporary directory that user
// owns, listening on a free loopback port (never 5432) with its unix
// socket in that directory. The server is stopped by PID in t.Cleanup and
// dies with the test binary. A failed test gets the server's log printed.
//
//	srv := pgtest.Start(t)
//	st, _ := postgres.New(postgres.Options{URL: srv.URL()})
//	srv.Stop(); srv.Start()   // fast shutdown, then the same data again
//
// Without the binaries the tests are skipped, unless the CI environment
// variable is set: CI must never skip them silently (scripts/test.sh
// installs Debian's postgresql package).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest/pgcluster"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// BinDir holds initdb and postgres: Debian's postgresql package (15).
const BinDir = pgcluster.BinDir

const (
	// readyTimeout bounds how long a server may take to accept connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds a fast shutdown before the server is killed.
	stopTimeout = 10 * time.Second
	// defaultPort is the machine's own server's: never used.
	defaultPort = pgcluster.DefaultPort
)

// Binary returns the path of one of PostgreSQL's programs. It skips the
// test when it is missing, or fails it when the CI variable is set.
func Binary(t testing.TB, name string) string {
	t.Helper()
	return testbin.Tool(t, filepath.Join(BinDir, name), "Debian package postgresql")
}

// Server is one PostgreSQL server. Its methods are safe for concurrent use.
type Server struct {
	t        testing.TB
	dir      string // owned by the server's user: data/, the socket, the log
	port     int
	password string
	cred     *syscall.Credential // nil when not running as root

	mu   sync.Mutex
	proc *testbin.Process // nil before the first start
}

// Start initialises a database cluster and starts a server on it. It
// returns once the server accepts connections. The superuser "postgres" has
// a random password (scram-sha-256 on loopback), so tests can check that it
// never shows.
func Start(t testing.TB) *Server {
	t.Helper()
	Binary(t, "initdb")
	Binary(t, "postgres")
	s := &Server{t: t, port: freePort(t), password: "pw-" + randomHex(8)}
	cred, err := pgcluster.Credential()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.cred = cred
	s.dir, err = os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.dumpLog()
		}
		_ = os.RemoveAll(s.dir)
	})
	if err := pgcluster.Own(s.dir, cred); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := pgcluster.Init(s.dir, s.password, cred); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.Start()
	return s
}

// URL is a postgres:// URL of the server's postgres database, password
// included.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", s.password, s.Addr())
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Password is the superuser's password, for tests that look for it.
func (s *Server) Password() string { return s.password }

// PID is the postmaster's process id, or 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return 0
	}
	return s.proc.PID()
}

// Start starts the server on its data directory when it is not running,
// and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	if s.running() {
		s.mu.Unlock()
		return
	}
	log, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		s.t.Fatalf("pgtest: %v", err)
	}
	defer log.Close()
	// Tests do not simulate power loss: what a committed transaction
	// wrote reaches the kernel either way, which a server stopped or
	// killed keeps.
	cmd := pgcluster.Command(s.dir, s.port, s.cred,
		"fsync=off", "full_page_writes=off", "max_connections=100", "shared_buffers=16MB")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("pgtest: start postgres: %v", err)
	}
	proc := testbin.Watch(cmd)
	s.proc = proc
	s.mu.Unlock()
	if err := s.waitReady(proc); err != nil {
		s.dumpLog()
		s.t.Fatalf("pgtest: postgres on %s not ready: %v", s.Addr(), err)
	}
}

// Stop shuts the server down the fast way (SIGINT: open transactions are
// rolled back, connections closed, everything committed is kept) and waits
// for it to exit, killing it if it takes longer than stopTimeout. It is a
// no-op when the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		s.proc.Stop(syscall.SIGINT, stopTimeout)
	}
}

// running reports whether the server runs; s.mu is held.
func (s *Server) running() bool { return s.proc != nil && s.proc.Running() }

// Conn returns a connection for assertions, closed in t.Cleanup.
func (s *Server) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// waitReady waits until the server accepts a connection and a ping.
func (s *Server) waitReady(p *testbin.Process) error {
	return p.Ready(readyTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		return c.Ping(ctx)
	})
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// dumpLog prints the tail of the server log: enough to see why it failed.
func (s *Server) dumpLog() { testbin.LogTail(s.t, "postgres "+s.Addr(), s.logPath()) }

// freePort returns a loopback port that was free a moment ago, never the
// machine's own server's.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pgtest: listen on loopback: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		// The unix socket is named after the port too: any free port will
		// do except the default one.
		if port != defaultPort {
			return port
		}
	}
	t.Fatal("pgtest: no free loopback port in 100 attempts")
	return 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}

//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest/pgcluster"
)

// durableStores are the stores --stores may add to a run, beside memory and
// Redis: each is one more idempotency-proxy target of that name.
//
//	postgres    a postgres of the run's own (pgcluster), durable settings
//	file        the file store in a temporary directory, fsync: false (its default)
//	file-fsync  the same with fsync: true
var durableStores = []string{"postgres", "file", "file-fsync"}

func parseStores(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(durableStores, f) {
			return nil, fmt.Errorf("unknown store %q (want %s)", f, strings.Join(durableStores, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// startStores starts one idempotency-proxy per store in front of the run's
// upstream, and the postgres server the postgres target needs.
func startStores(ctx context.Context, kids *children, bin string, stores []string, ts []target, pprof bool) ([]target, error) {
	up := ts[0]
	var out []target
	for _, name := range stores {
		t := target{name: name, upPID: up.upPID, upAddr: up.upAddr, isProxy: true}
		var args, env []string
		switch name {
		case "postgres":
			pid, url, err := kids.startPostgres(ctx)
			if err != nil {
				return nil, err
			}
			t.storePID, t.storeTree = pid, true
			args = []string{"--postgres-url", url}
		case "file", "file-fsync":
			dir, err := os.MkdirTemp(kids.dir, name+"-")
			if err != nil {
				return nil, err
			}
			args = []string{"--store-path", dir}
			env = []string{"IDEMPOTENCY_PROXY_STORE_FILE_FSYNC=" + strconv.FormatBool(name == "file-fsync")}
		}
		pid, addr, admin, err := kids.startProxyOn(ctx, "proxy-"+name, bin, up.upAddr, args, env, pprof)
		if err != nil {
			return nil, err
		}
		t.pid, t.base, t.admin = pid, "http://"+addr, admin
		if pprof {
			t.pprof = admin
		}
		out = append(out, t)
	}
	return out, nil
}

// startPostgres initialises a cluster in a directory of its own (owned by
// the OS user postgres when this runs as root) and starts postgres on a
// free loopback port — never 5432 — with PostgreSQL's default durability
// (fsync and synchronous_commit on), on the servers' CPU when the layout
// pins. It returns the postmaster's PID and a URL with the superuser's
// random password. killAll stops it with SIGINT (a fast shutdown).
func (c *children) startPostgres(ctx context.Context) (pid int, url string, err error) {
	if _, err := os.Stat(filepath.Join(pgcluster.BinDir, "postgres")); err != nil {
		return 0, "", fmt.Errorf("postgres not found in %s (Debian package postgresql): %w", pgcluster.BinDir, err)
	}
	cred, err := pgcluster.Credential()
	if err != nil {
		return 0, "", err
	}
	dir, err := os.MkdirTemp("", "loadbench-pg-")
	if err != nil {
		return 0, "", err
	}
	c.mu.Lock()
	c.dirs = append(c.dirs, dir)
	c.mu.Unlock()
	if err := pgcluster.Own(dir, cred); err != nil {
		return 0, "", err
	}
	var pw [8]byte
	_, _ = rand.Read(pw[:])
	password := "pw-" + hex.EncodeToString(pw[:])
	if err := pgcluster.Init(dir, password, cred); err != nil {
		return 0, "", err
	}
	port, err := freePGPort()
	if err != nil {
		return 0, "", err
	}
	cmd := pgcluster.Command(dir, port, cred, "max_connections=100", "shared_buffers=128MB")
	if err := c.launch("postgres", cmd); err != nil {
		return 0, "", err
	}
	pid = cmd.Process.Pid
	c.mu.Lock()
	c.gentle[pid] = true
	c.mu.Unlock()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The server is ready once it accepts TCP connections; the proxy's own
	// start-up (it creates its table) then proves the URL.
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		if err := alive(pid); err != nil {
			return false, fmt.Errorf("postgres exited during start-up: %w", err)
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return 0, "", fmt.Errorf("postgres: %w\n%s", err, c.logTail(pid))
	}
	return pid, fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", password, addr), nil
}

// freePGPort returns a loopback port that was free a moment ago, never the
// machine's own server's.
func freePGPort() (int, error) {
	for range 100 {
		addr, err := freeAddr()
		if err != nil {
			return 0, err
		}
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port != pgcluster.DefaultPort {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port in 100 attempts")
}

// treeCPUTime is the CPU time of pid and of its children: postgres serves
// each connection from a process the postmaster forks. The proxy keeps its
// connections, so no backend exits during a measurement and takes its time
// with it.
func treeCPUTime(pid int) (time.Duration, error) {
	total, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != want { // state, then ppid
			continue
		}
		if d, err := cpuTime(child); err == nil {
			total += d
		}
	}
	return total, nil
}

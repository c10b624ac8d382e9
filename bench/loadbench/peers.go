//go:build linux

package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// knownPeers are the other idempotency stacks a run can measure beside the
// product. fiber: Fiber v3's idempotency middleware in front of its proxy
// middleware (bench/fiberpeer), on its in-memory storage and on the run's
// redis-server.
var knownPeers = []string{"fiber"}

func parsePeers(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(knownPeers, f) {
			return nil, fmt.Errorf("unknown peer %q: want one of %v", f, knownPeers)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// fiberDB is the Redis database of fiber-redis: its keys are the bare
// Idempotency-Key values, which must not meet the product's records.
const fiberDB = 2

// peerStore is a store a peer runs on: its target is named PEER-name.
type peerStore struct{ name, redisURL string }

// peerStores are the stores every peer is measured on: its in-memory one,
// and database fiberDB of the run's redis-server at redisAddr.
func peerStores(redisAddr string) []peerStore {
	return []peerStore{
		{"memory", ""},
		{"redis", fmt.Sprintf("redis://%s/%d", redisAddr, fiberDB)},
	}
}

// startPeers builds and starts each peer on the memory store and on the
// run's redis-server; ts are the targets started so far (startAll's).
func startPeers(ctx context.Context, kids *children, peers []string, ts []target, pprof bool) ([]target, error) {
	var out []target
	rd := ts[2]
	for _, p := range peers {
		bin, err := kids.buildPeer(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, store := range peerStores(rd.storeAddr) {
			t, err := kids.startPeer(ctx, p+"-"+store.name, bin, rd.upAddr, store.redisURL, pprof)
			if err != nil {
				return nil, err
			}
			t.upPID = rd.upPID
			if store.redisURL != "" {
				t.storePID, t.storeAddr = rd.storePID, rd.storeAddr
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// buildPeer builds the benchmark module's <peer>peer command, once per
// run. Only the benchmark's module links a peer's dependencies, never the
// product's.
func (c *children) buildPeer(ctx context.Context, peer string) (string, error) {
	bin := filepath.Join(c.dir, peer+"peer")
	pkg := productModule + "/bench/" + peer + "peer"
	if msg, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return bin, nil
}

// startPeer starts a peer binary in front of upstream; redisURL selects its
// Redis storage, empty its in-memory one.
func (c *children) startPeer(ctx context.Context, label, bin, upstream, redisURL string, pprof bool) (target, error) {
	addr, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	admin, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	args := []string{"--listen", addr, "--admin-listen", admin, "--upstream", "http://" + upstream}
	if redisURL != "" {
		args = append(args, "--redis-url", redisURL)
	}
	cmd, err := c.start(label, bin, args, c.layout.childEnv())
	if err != nil {
		return target{}, err
	}
	pid := cmd.Process.Pid
	if err := waitHTTP(ctx, "http://"+admin+"/ready", cmd); err != nil {
		return target{}, fmt.Errorf("%s: %w\n%s", label, err, c.logTail(pid))
	}
	t := target{name: label, base: "http://" + addr, pid: pid, upAddr: upstream, admin: admin, isProxy: true, peer: true}
	if pprof {
		t.pprof = admin
	}
	return t, nil
}

//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// childEnvVar makes the test binary, re-executed by children.startSelf,
// run as the benchmark's helper process instead of its tests.
const childEnvVar = "LOADBENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnvVar) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func pinnedLayout(t *testing.T) layout {
	t.Helper()
	lay, err := newLayout("pinned")
	if err != nil {
		t.Skipf("pinned layout unavailable here: %v", err)
	}
	return lay
}

// TestPinnedChildRunsOnTheServerCPUWithOneProc starts children the way a
// pinned run does and reads back, from /proc and from the child, that every
// thread of each may run on the servers' CPU only and that a Go child runs
// with GOMAXPROCS 1; the benchmark itself keeps its mask.
func TestPinnedChildRunsOnTheServerCPUWithOneProc(t *testing.T) {
	lay := pinnedLayout(t)
	t.Setenv(childEnvVar, "1")
	parentBefore, err := threadCPUs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	kids, err := newChildren(lay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kids.killAll)
	ctx := context.Background()
	want := strconv.Itoa(lay.serverCPU)

	pid, addr, err := kids.startSelf(ctx, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := threadCPUs(pid); err != nil || got != want {
		t.Errorf("upstream child's threads may run on CPUs %q (%v), want %q", got, err, want)
	}
	if got := selfGOMAXPROCS("http://" + addr); got != "1" {
		t.Errorf("upstream child runs with GOMAXPROCS %q, want 1", got)
	}
	if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
		t.Errorf("upstream child's environment lacks GOMAXPROCS=1 (%v)", err)
	}

	if _, err := exec.LookPath("redis-server"); err == nil {
		rpid, _, err := kids.startRedis(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := threadCPUs(rpid); err != nil || got != want {
			t.Errorf("redis-server's threads may run on CPUs %q (%v), want %q", got, err, want)
		}
	}

	if got, err := threadCPUs(os.Getpid()); err != nil || got != parentBefore {
		t.Errorf("after starting pinned children this process's threads may run on %q (%v), want %q as before", got, err, parentBefore)
	}
}

// TestSharedChildKeepsEveryCPU is the other side: without pinning a child
// has the CPUs and the GOMAXPROCS the machine gives it.
func TestSharedChildKeepsEveryCPU(t *testing.T) {
	mine, err := cpusAllowed(os.Getpid())
	if err != nil || len(mine) < 2 {
		t.Skipf("needs two CPUs to tell apart, this process may use %v (%v)", mine, err)
	}
	shared, err := newLayout("shared")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(childEnvVar, "1")
	kids, err := newChildren(shared)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kids.killAll)
	pid, addr, err := kids.startSelf(context.Background(), "upstream")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := threadCPUs(pid); err != nil || got != formatCPUList(mine) {
		t.Errorf("shared child's threads may run on %q (%v), want %q", got, err, formatCPUList(mine))
	}
	if got, want := selfGOMAXPROCS("http://"+addr), strconv.Itoa(runtime.GOMAXPROCS(0)); got != want {
		t.Errorf("shared child runs with GOMAXPROCS %s, want %s like this process", got, want)
	}
}

// TestPinSelfHoldsForThreadsStartedLater pins this process, then makes the
// runtime start threads, and checks that every thread has the mask.
func TestPinSelfHoldsForThreadsStartedLater(t *testing.T) {
	lay := pinnedLayout(t)
	var old cpuMask
	if err := getAffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setProcessAffinity(old); err != nil {
			t.Errorf("restoring this process's CPUs: %v", err)
		}
	})
	if err := pinSelf(lay.clientCPU); err != nil {
		t.Fatal(err)
	}
	// Goroutines locked to their threads and blocked in a system call
	// each hold a thread, so the runtime has to start new ones.
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	const n = 4
	locked, done := make(chan struct{}), make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked <- struct{}{}
			var b [1]byte
			_, _ = syscall.Read(fds[0], b[:])
			done <- struct{}{}
		}()
	}
	for range n {
		<-locked
	}
	tids, _ := threads(os.Getpid())
	got, err := threadCPUs(os.Getpid())
	syscall.Close(fds[1]) // wakes the readers: EOF
	for range n {
		<-done
	}
	syscall.Close(fds[0])
	if want := strconv.Itoa(lay.clientCPU); err != nil || got != want {
		t.Errorf("with %d threads, this process's threads may run on %q (%v), want %q", len(tids), got, err, want)
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0-1", []int{0, 1}},
		{"0-2,5,8-9", []int{0, 1, 2, 5, 8, 9}},
	}
	for _, tc := range tests {
		got, err := parseCPUList(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back := formatCPUList(got); back != tc.in {
			t.Errorf("formatCPUList(%v) = %q, want %q", got, back, tc.in)
		}
	}
	for _, bad := range []string{"", "x", "3-1", "-1", "0-5000"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q): no error", bad)
		}
	}
}

func TestNewLayout(t *testing.T) {
	if l, err := newLayout("shared"); err != nil || l.pinned() || l.childEnv() != nil {
		t.Errorf(`newLayout("shared") = %+v, %v; want unpinned, no child environment`, l, err)
	}
	if _, err := newLayout("spread"); err == nil {
		t.Error(`newLayout("spread"): no error`)
	}
	l := pinnedLayout(t)
	if l.clientCPU == l.serverCPU || !slices.Equal(l.childEnv(), []string{"GOMAXPROCS=1"}) {
		t.Errorf(`newLayout("pinned") = %+v; want two CPUs and GOMAXPROCS=1 for children`, l)
	}
}

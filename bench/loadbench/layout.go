//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// layout says where the processes of a run may execute.
//
// shared: every process on every CPU, as the scheduler likes: what the
// benchmark always did.
//
// pinned: a sidecar's case. The load generator alone on the first CPU this
// program may use; the upstream, the plain proxy, the proxies under test,
// the floor and redis-server together on the second, each Go process with
// GOMAXPROCS=1. The proxy then competes for one CPU with the service it
// protects, and the generator's own cost is kept off that CPU.
type layout struct {
	name      string
	clientCPU int // -1: not pinned
	serverCPU int // -1: not pinned
}

func (l layout) pinned() bool { return l.serverCPU >= 0 }

// childEnv is what every Go child gets in its environment: GOMAXPROCS=1 on
// one CPU, set explicitly rather than left to the runtime's reading of the
// affinity mask, so the report can state it.
func (l layout) childEnv() []string {
	if !l.pinned() {
		return nil
	}
	return []string{"GOMAXPROCS=1"}
}

// newLayout resolves a --layout value against the CPUs this process may
// use.
func newLayout(name string) (layout, error) {
	switch name {
	case "shared":
		return layout{name: name, clientCPU: -1, serverCPU: -1}, nil
	case "pinned":
		cpus, err := cpusAllowed(os.Getpid())
		if err != nil {
			return layout{}, err
		}
		if len(cpus) < 2 {
			return layout{}, fmt.Errorf("--layout pinned needs two CPUs, this process may use %v", cpus)
		}
		return layout{name: name, clientCPU: cpus[0], serverCPU: cpus[1]}, nil
	}
	return layout{}, fmt.Errorf("unknown layout %q: want shared or pinned", name)
}

// cpuMask is a Linux cpu_set_t for up to 1,024 CPUs.
type cpuMask [16]uint64

func maskOf(cpu int) cpuMask {
	var m cpuMask
	m[cpu/64] |= 1 << (cpu % 64)
	return m
}

// setAffinity sets the CPU mask of one thread (tid 0: the calling thread).
// sched_setaffinity acts on a thread, not a process, whatever its name says.
func setAffinity(tid int, m cpuMask) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	if e != 0 {
		return fmt.Errorf("sched_setaffinity(%d): %w", tid, e)
	}
	return nil
}

// pinSelf restricts every thread of this process to cpu.
func pinSelf(cpu int) error { return setProcessAffinity(maskOf(cpu)) }

// setProcessAffinity sets the mask of every thread of this process. Threads
// started later inherit the mask of the thread that starts them, so after a
// pass that finds no thread it has not set, the whole process keeps m.
func setProcessAffinity(m cpuMask) error {
	done := map[int]bool{}
	for range 100 {
		tids, err := threads(os.Getpid())
		if err != nil {
			return err
		}
		fresh := false
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh = true
			if err := setAffinity(tid, m); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
	return errors.New("pinning this process: its threads kept changing")
}

// startOn starts cmd with its affinity set to cpu from its first
// instruction: a child inherits the mask of the thread that forks it, so the
// fork happens on a thread locked for the purpose, set to cpu, and set back
// once the child runs. The runtime starts no thread from a locked one, so
// the rest of this process keeps its mask meanwhile. The thread is not
// discarded after use: Pdeathsig fires when the forking thread exits, not
// the process.
func startOn(cmd *exec.Cmd, cpu int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var old cpuMask
		if err := getAffinity(0, &old); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		if err := setAffinity(0, maskOf(cpu)); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err := cmd.Start()
		if rerr := setAffinity(0, old); rerr != nil {
			// Leave the thread locked so that it ends with this goroutine
			// rather than run others on cpu; its child goes with it.
			errc <- errors.Join(err, rerr)
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// getAffinity reads the CPU mask of one thread (tid 0: the calling thread).
func getAffinity(tid int, m *cpuMask) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, uintptr(tid), unsafe.Sizeof(*m), uintptr(unsafe.Pointer(m)))
	if e != 0 {
		return fmt.Errorf("sched_getaffinity(%d): %w", tid, e)
	}
	return nil
}

// threads lists the thread IDs of a process.
func threads(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// cpusAllowed returns the CPUs a process (its main thread) may run on,
// from Cpus_allowed_list in /proc/PID/status.
func cpusAllowed(pid int) ([]int, error) {
	return cpusAllowedOf("/proc/" + strconv.Itoa(pid) + "/status")
}

func cpusAllowedOf(statusPath string) ([]int, error) {
	b, err := os.ReadFile(statusPath)
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return parseCPUList(strings.TrimSpace(v))
		}
	}
	return nil, fmt.Errorf("%s: no Cpus_allowed_list", statusPath)
}

// threadCPUs returns the distinct CPU lists of all threads of pid, so a
// thread the pinning missed would show.
func threadCPUs(pid int) (string, error) {
	tids, err := threads(pid)
	if err != nil {
		return "", err
	}
	var lists []string
	for _, tid := range tids {
		cpus, err := cpusAllowedOf("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status")
		if err != nil {
			continue // the thread exited
		}
		if s := formatCPUList(cpus); !slices.Contains(lists, s) {
			lists = append(lists, s)
		}
	}
	slices.Sort(lists)
	return strings.Join(lists, " and "), nil
}

// parseCPUList parses the kernel's list format: "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", s, err)
			}
		}
		if a < 0 || b < a || b >= 64*len(cpuMask{}) {
			return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// formatCPUList is the inverse of parseCPUList for a sorted list.
func formatCPUList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

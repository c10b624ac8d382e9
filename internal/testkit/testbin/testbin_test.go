package testbin

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestProgramIsBuiltOnce(t *testing.T) {
	first := Upstream.Path(t)
	info, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if second := Upstream.Path(t); second != first {
		t.Errorf("second Path = %s, want the first build %s", second, first)
	}
	if again, _ := os.Stat(first); !again.ModTime().Equal(info.ModTime()) {
		t.Error("the binary was built again")
	}
}

// A process a test started never outlives the test, so it cannot hold a
// port another test picks.
func TestProcessIsKilledWhenItsTestEnds(t *testing.T) {
	var p *Process
	t.Run("starts", func(t *testing.T) {
		addr := FreeAddr(t)
		p = Start(t, Command{Path: Upstream.Path(t), Args: []string{"--listen", addr}})
		if err := p.WaitReady(10*time.Second, "http://"+addr+"/"); err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-p.Exited():
	default:
		t.Fatal("the process still runs after its test ended")
	}
}

func TestWaitReturnsTheExitStatus(t *testing.T) {
	p := Start(t, Command{Path: Upstream.Path(t), Args: []string{"--no-such-flag"}})
	code, ok := p.Wait(10 * time.Second)
	if !ok || code != 2 {
		t.Errorf("Wait = %d, %v; want 2 (the flag package's usage status), true", code, ok)
	}
	if err := p.WaitReady(time.Second, "http://"+FreeAddr(t)+"/"); err == nil {
		t.Error("WaitReady succeeded for a process that exited")
	}
}

// A server that exits while a test waits for it fails the wait at once,
// with what the wait last saw, not at the end of the bound.
func TestReadyFailsWhenTheProcessExits(t *testing.T) {
	p := Start(t, Command{Path: "/bin/sh", Args: []string{"-c", "exit 3"}})
	err := p.Ready(time.Minute, func() error { return fmt.Errorf("not answering") })
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "not answering") {
		t.Fatalf("Ready = %v, want the exit (not the bound) and the last error", err)
	}
}

// Stop kills a process that ignores the signal once the bound passes.
func TestStopKillsWhatIgnoresTheSignal(t *testing.T) {
	out := &Buffer{}
	// A shell loop, not sleep: no child of the shell outlives the kill.
	p := Start(t, Command{Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo up; while :; do :; done"}, Stdout: out})
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "up") {
			return fmt.Errorf("the shell has not set its trap yet")
		}
		return nil
	})
	p.Stop(syscall.SIGTERM, 100*time.Millisecond)
	if p.Running() {
		t.Fatal("the process still runs after Stop")
	}
}

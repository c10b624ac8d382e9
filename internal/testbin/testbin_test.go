package testbin

import (
	"os"
	"testing"
	"time"
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

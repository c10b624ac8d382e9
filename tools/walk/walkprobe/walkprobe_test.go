package walkprobe

import (
	"strings"
	"testing"
)

func probed() { defer Exit(Enter("tools/walk/walkprobe/walkprobe_test.go", "probed")) }

func TestEnterRecordsTheFunctionAndExitItsCaller(t *testing.T) {
	Start()
	probed()
	got := Stop()
	if len(got) != 2 {
		t.Fatalf("recorded %d events, want an entry and an exit: %+v", len(got), got)
	}
	if e := got[0]; e.Exit || e.Func != "probed" || e.Goroutine == 0 {
		t.Errorf("entry = %+v", e)
	}
	if e := got[1]; !e.Exit || !strings.HasSuffix(e.File, "walkprobe_test.go") ||
		!strings.HasSuffix(e.Func, "TestEnterRecordsTheFunctionAndExitItsCaller") || e.Goroutine != got[0].Goroutine {
		t.Errorf("exit = %+v, want the return to this test", e)
	}
}

func TestNothingIsRecordedAfterStop(t *testing.T) {
	Start()
	Stop()
	probed()
	if got := Stop(); len(got) != 0 {
		t.Errorf("recorded %+v after Stop", got)
	}
}

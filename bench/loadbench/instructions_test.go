//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

func TestCallgrindTotalReadsTheInstructionCount(t *testing.T) {
	dump := "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\n\nfl=(1) a.go\nfn=(1) main\n16 3\n\nsummary: 59769158\n\n\ntotals: 59769158\n"
	n, ok, err := callgrindTotal(strings.NewReader(dump))
	if err != nil || !ok || n != 59769158 {
		t.Errorf("callgrindTotal = %d, %v, %v; want 59769158, true", n, ok, err)
	}
	// A dump still being written has no totals yet.
	n, ok, err = callgrindTotal(strings.NewReader("version: 1\nevents: Ir\nfn=(1) main\n16 3\n"))
	if err != nil || ok {
		t.Errorf("callgrindTotal of a partial dump = %d, %v, %v; want not ok, no error", n, ok, err)
	}
	if _, _, err := callgrindTotal(strings.NewReader("totals: many\n")); err == nil {
		t.Error("callgrindTotal(totals: many): no error")
	}
}

func TestInstrScenariosKeepsTheCountedOnesInTableOrder(t *testing.T) {
	got, err := instrScenarios([]scenario{hit, mixed, noKey, miss})
	if err != nil || !slices.Equal(got, []scenario{noKey, miss, hit}) {
		t.Errorf("instrScenarios = %v, %v; want [no-key miss hit]", got, err)
	}
	if _, err := instrScenarios([]scenario{mixed}); err == nil {
		t.Error("instrScenarios([mixed]): no error")
	}
}

// The tax is a keyed request's count above the same target's no-key
// request; the ratios are to the plain proxy's forwarded request.
func TestInstructionReportShowsRatiosAndTheTax(t *testing.T) {
	r := instrReport{
		targets: []string{"plain", "memory", "floor"},
		scens:   []scenario{noKey, miss, hit},
		counts: map[string]map[scenario]float64{
			"plain":  {noKey: 100_000, miss: 104_000, hit: 104_000},
			"memory": {noKey: 102_000, miss: 146_500, hit: 50_000},
			"floor":  {hit: 40_000},
		},
	}
	var b bytes.Buffer
	r.write(&b)
	out := b.String()
	for _, want := range []string{"146.5K", "1.47×", "+44.5K", "-52.0K", "0.40×"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	_, tax, _ := strings.Cut(out, "idempotency tax")
	if tax == "" {
		t.Fatalf("report has no tax table:\n%s", out)
	}
	for _, line := range strings.Split(tax, "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "floor" || f[0] == "plain") {
			t.Errorf("the tax table lists %s, which has no tax: %q", f[0], line)
		}
	}
}

func TestWrappedChildRunsUnderItsWrapper(t *testing.T) {
	kids, err := newChildren(unpinned)
	if err != nil {
		t.Fatal(err)
	}
	defer kids.killAll()
	kids.wrap = []string{"env", "WRAPPED=yes"}
	kids.env = []string{"EXTRA=1"}
	cmd, err := kids.start("wrapped", "sh", []string{"-c", `echo "$WRAPPED $EXTRA $0"`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	log, _ := os.ReadFile(kids.logs[cmd.Process.Pid])
	if got := strings.TrimSpace(string(log)); got != "yes 1 sh" {
		t.Errorf("wrapped child printed %q, want %q", got, "yes 1 sh")
	}
	if !slices.Equal(kids.wrap, []string{"env", "WRAPPED=yes"}) {
		t.Errorf("start changed the wrapper: %v", kids.wrap)
	}
}

// TestCountCellCountsAForwardedRequest counts the plain proxy under
// callgrind, as --instructions does: a forwarded request takes tens of
// thousands of instructions in user space, never none, never millions.
func TestCountCellCountsAForwardedRequest(t *testing.T) {
	valgrind := testbin.Tool(t, "valgrind", "Debian package valgrind")
	control := testbin.Tool(t, "callgrind_control", "Debian package valgrind")
	t.Setenv(childEnvVar, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kids, err := newChildren(unpinned)
	if err != nil {
		t.Fatal(err)
	}
	defer kids.killAll()
	_, upAddr, err := kids.startSelf(ctx, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	plain := counted{name: "plain", start: func(ctx context.Context, k *children) (int, string, error) {
		pid, addr, err := k.startSelf(ctx, "plain", "--upstream", "http://"+upAddr)
		return pid, "http://" + addr, err
	}}
	n, err := countCell(ctx, kids.dir, valgrind, control, plain, noKey, instrSettings{requests: 50, warmup: 20, conc: 1})
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	if n < 10_000 || n > 2_000_000 {
		t.Errorf("%.0f instructions a forwarded request, want tens of thousands", n)
	}
}

func TestInstructionReportHasNoTaxWithoutAKeyedScenario(t *testing.T) {
	r := instrReport{
		targets: []string{"plain", "memory"},
		scens:   []scenario{noKey},
		counts:  map[string]map[scenario]float64{"plain": {noKey: 100_000}, "memory": {noKey: 103_000}},
	}
	var b bytes.Buffer
	r.write(&b)
	if out := b.String(); strings.Contains(out, "tax") || !strings.Contains(out, "1.03×") {
		t.Errorf("no-key only: want the counts and ratios, no tax table:\n%s", out)
	}
}

// TestShadowTargetForwardsEveryHit starts memory-shadow as --instructions
// --shadow does, without callgrind: it is in shadow mode, so a recorded
// key's retry is forwarded, which its loader expects, and a loader
// expecting the enforce proxy's replay fails on it.
func TestShadowTargetForwardsEveryHit(t *testing.T) {
	t.Setenv(childEnvVar, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kids, err := newChildren(unpinned)
	if err != nil {
		t.Fatal(err)
	}
	defer kids.killAll()
	bin, err := kids.proxyBinary(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	_, upAddr, err := kids.startSelf(ctx, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	shadow := shadowTarget(bin, upAddr)
	if shadow.name != "memory-shadow" || !shadow.isProxy || !shadow.forwardsAll {
		t.Fatalf("shadow target = %+v, want memory-shadow, a proxy that forwards all", shadow)
	}
	_, base, err := shadow.start(ctx, kids)
	if err != nil {
		t.Fatal(err)
	}
	l := &loader{runID: randomID(), forwardsAll: true, limit: 20}
	if err := l.warmHits(ctx, base, true); err != nil {
		t.Fatalf("recording hit keys on memory-shadow: %v", err)
	}
	for _, scen := range countedScenarios {
		if _, err := l.run(ctx, base, true, scen, 1, time.Minute); err != nil {
			t.Errorf("%s against memory-shadow: %v", scen, err)
		}
	}
	enforcing := &loader{runID: l.runID, limit: 20}
	if _, err := enforcing.run(ctx, base, true, hit, 1, time.Minute); !errors.Is(err, errReplay) {
		t.Errorf("hit expecting a replay from memory-shadow: %v, want errReplay", err)
	}
}

// A loader for a shadow target fails a replay: the count would be of the
// enforce hit path, not of the forwarded request it is named for.
func TestForwardsAllLoaderFailsAReplay(t *testing.T) {
	ctx := context.Background()
	l := &loader{runID: "test", forwardsAll: true}
	if err := l.warmHits(ctx, fakeProxy(t, http.StatusOK, true, false), true); !errors.Is(err, errReplay) {
		t.Errorf("recording hit keys on a server that replays: %v, want errReplay", err)
	}
	if _, err := l.run(ctx, fakeProxy(t, http.StatusOK, true, false), true, mixed, 2, 50*time.Millisecond); !errors.Is(err, errReplay) {
		t.Errorf("mixed run against a server that replays its retries: %v, want errReplay", err)
	}
	if _, err := l.run(ctx, fakeProxy(t, http.StatusOK, false, false), true, hit, 2, 50*time.Millisecond); err != nil {
		t.Errorf("hit run against a server that forwards every retry: %v", err)
	}
}

// --shadow adds a target to the instruction count only: alone it is
// refused before anything starts, not ignored.
func TestShadowFlagWithoutInstructionsIsRefused(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--shadow"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--instructions") {
		t.Errorf("run(--shadow) = %d, stderr %q; want 2 and a message naming --instructions", code, stderr.String())
	}
}

package deploy_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// checkTimeouts is what one `--check` may take at most: the store and the
// upstream checks, 5s each (cmd/idempotency-proxy/check.go).
const checkTimeouts = 10 * time.Second

// The sidecar gates its start on `idempotency-proxy --check`, run on the
// image's binary with the config file the entrypoint uses, so it checks
// exactly what the proxy will run with.
func TestSidecarStartsOnlyAfterCheckPasses(t *testing.T) {
	proxyC, _ := deploymentContainers(t)
	sp := proxyC.StartupProbe
	if sp == nil {
		t.Fatal("the proxy container has no startupProbe running --check")
	}

	stages := dockerStages(t, filepath.Join(repoRoot, "Dockerfile"))
	var entry []string
	if e := instructions(stages[len(stages)-1], "ENTRYPOINT"); len(e) != 1 || json.Unmarshal([]byte(e[0]), &entry) != nil {
		t.Fatalf("cannot read the image's ENTRYPOINT: %q", e)
	}
	want := append(slices.Clone(entry), "--check")
	if !slices.Equal(sp.Exec.Command, want) {
		t.Errorf("startupProbe command = %q, want the entrypoint plus --check: %q", sp.Exec.Command, want)
	}
	if got := time.Duration(sp.TimeoutSeconds) * time.Second; got <= checkTimeouts {
		t.Errorf("startupProbe timeoutSeconds = %v, want more than the %v a failing --check may take", got, checkTimeouts)
	}
	// A Redis failover or a slow application start must not restart the
	// proxy: give the checks minutes, not seconds.
	if window := time.Duration(sp.PeriodSeconds*sp.FailureThreshold) * time.Second; window < 2*time.Minute {
		t.Errorf("startupProbe gives up after %v, want at least 2m", window)
	}
}

//go:build !linux

package e2e

import "os/exec"

// setDeathSignal is a no-op where Pdeathsig does not exist; t.Cleanup still
// kills the proxy when the test ends normally.
func setDeathSignal(*exec.Cmd) {}

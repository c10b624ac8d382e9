//go:build !linux

package testbin

import "os/exec"

// setDeathSignal is a no-op where Pdeathsig does not exist; t.Cleanup still
// kills the process when the test ends normally.
func setDeathSignal(*exec.Cmd) {}

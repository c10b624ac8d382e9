//go:build !linux

package redistest

import "os/exec"

// setDeathSignal is a no-op where Pdeathsig does not exist; t.Cleanup still
// kills the server when the test ends normally.
func setDeathSignal(*exec.Cmd) {}

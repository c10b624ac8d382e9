package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server when the test binary dies,
// so an aborted test run leaves no redis-server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

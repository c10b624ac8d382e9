package testbin

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the process when the test binary
// dies, so an aborted run leaves nothing behind holding a port.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

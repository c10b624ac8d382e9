// Package pgcluster holds what starting a PostgreSQL server of one's own
// takes, without the testing package, so that pgtest and the load
// benchmark share it: where Debian's binaries are, the OS user postgres
// runs as when the caller is root (PostgreSQL refuses to run as root), and
// the initdb and postgres command lines for a cluster in a directory that
// user owns, listening on loopback only with its socket in that directory.
package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// BinDir holds initdb and postgres: Debian's postgresql package (15).
const BinDir = "/usr/lib/postgresql/15/bin"

const (
	// osUser runs the server when the caller is root.
	osUser = "postgres"
	// DefaultPort is the machine's own server's: never to be used.
	DefaultPort = 5432
)

// Credential is the postgres user's when running as root, else nil (the
// server then runs as the current user, which it accepts).
func Credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs the OS user %s (Debian's postgresql package creates it): %w", osUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// DataDir is where Init puts the cluster inside dir.
func DataDir(dir string) string { return filepath.Join(dir, "data") }

// Own hands path to the server's user; a nil cred leaves it as it is.
func Own(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// Init creates a cluster in DataDir(dir), dir already owned by cred's user:
// superuser postgres with password (scram-sha-256 over TCP), trust on the
// unix socket, UTF8, locale C.
func Init(dir, password string, cred *syscall.Credential) error {
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if err := Own(pwfile, cred); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(BinDir, "initdb"), "-D", DataDir(dir), "-U", "postgres", "--pwfile", pwfile,
		"--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// Command is the postgres server on the cluster Init made in dir, on
// 127.0.0.1:port with its socket in dir, as cred's user, killed when the
// caller dies; settings are more -c NAME=VALUE pairs.
func Command(dir string, port int, cred *syscall.Credential, settings ...string) *exec.Cmd {
	args := []string{"-D", DataDir(dir), "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(filepath.Join(BinDir, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

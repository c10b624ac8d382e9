//go:build linux

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profile is a CPU profile being taken of a target while it is measured,
// through its /debug/pprof/profile: the proxies' admin listener (they run
// with admin.pprof on when --profile is set), the plain proxy's and the
// floor's own address. Sampling costs a target a little CPU, so profiles
// are taken over the first round's measurements only.
type profile struct {
	path string
	done chan error
}

// startProfile starts a profile of t over d (whole seconds, at least one)
// into dir, or, unless keep, into nothing: the sampling's cost without the
// file. It returns nil when dir is empty or t has no profile endpoint.
func startProfile(dir string, t target, scen scenario, d time.Duration, keep bool) *profile {
	if dir == "" || t.pprof == "" {
		return nil
	}
	path := os.DevNull
	if keep {
		path = filepath.Join(dir, fmt.Sprintf("%s-%s.pprof", scen, t.name))
	}
	p := &profile{path: path, done: make(chan error, 1)}
	secs := max(int(d/time.Second), 1)
	go func() {
		p.done <- fetchProfile("http://"+t.pprof+fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), p.path)
	}()
	return p
}

// wait returns once the profile is written.
func (p *profile) wait() error {
	if p == nil {
		return nil
	}
	if err := <-p.done; err != nil {
		return fmt.Errorf("CPU profile %s: %w", p.path, err)
	}
	return nil
}

func fetchProfile(url, path string) error {
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

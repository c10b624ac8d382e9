//go:build linux

package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStoresNamesEachStoreOnceAndRejectsOthers(t *testing.T) {
	got, err := parseStores(" postgres,file,postgres ")
	if err != nil || !slices.Equal(got, []string{"postgres", "file"}) {
		t.Errorf(`parseStores(" postgres,file,postgres ") = %v, %v; want [postgres file]`, got, err)
	}
	if got, err := parseStores(""); err != nil || got != nil {
		t.Errorf(`parseStores("") = %v, %v; want none`, got, err)
	}
	for _, bad := range []string{"redis", "postgres,", "memory", "file,sqlite"} {
		_, err := parseStores(bad)
		if err == nil || !strings.Contains(err.Error(), "want postgres, file, file-fsync") {
			t.Errorf("parseStores(%q) = %v, want an error naming the stores", bad, err)
		}
	}
}

// A child's CPU counts in its parent's tree: postgres's backends do the
// work of its connections.
func TestTreeCPUTimeCountsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	self := os.Getpid()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		tree, err := treeCPUTime(self)
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		own, _ := cpuTime(self)
		child, _ := cpuTime(cmd.Process.Pid)
		if child > 20*time.Millisecond && tree >= own+child/2 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("treeCPUTime left out a child that spun for 10 s")
}

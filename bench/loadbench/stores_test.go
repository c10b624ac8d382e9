//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
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
// work of its connections. The file builds on Linux only, where sh and
// /proc are always there, so either missing is a failure.
func TestTreeCPUTimeCountsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a spinning child: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	self := os.Getpid()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		tree, err := treeCPUTime(self)
		if err != nil {
			return fmt.Errorf("read the tree's CPU time: %w", err)
		}
		own, _ := cpuTime(self)
		child, _ := cpuTime(cmd.Process.Pid)
		if child <= 20*time.Millisecond || tree < own+child/2 {
			return fmt.Errorf("tree %v, own %v, child %v: the child is left out", tree, own, child)
		}
		return nil
	})
}

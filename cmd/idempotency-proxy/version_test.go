package main

import (
	"runtime/debug"
	"testing"
)

// --version of a plain go build names the commit it was built from, on
// every Go since 1.24 as before; a build at a tag names the tag.
func TestVersionOfACheckoutBuildNamesItsCommit(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "devel"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs", "git", "vcs.revision", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2", "vcs.modified", "false")}, "devel+3f2a1b9c0d4e"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2", "vcs.modified", "true")}, "devel+3f2a1b9c0d4e-dirty"},
		// Go 1.24 and later record a pseudo-version for a build of a checkout.
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261130091721-3f2a1b9c0d4e"},
			Settings: vcs("vcs.revision", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2", "vcs.modified", "false")}, "devel+3f2a1b9c0d4e"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.1-0.20261130091721-3f2a1b9c0d4e+dirty"},
			Settings: vcs("vcs.revision", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2", "vcs.modified", "true")}, "devel+3f2a1b9c0d4e-dirty"},
		// A build at a tag records the tag.
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"},
			Settings: vcs("vcs.revision", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2", "vcs.modified", "false")}, "v1.4.0"},
	} {
		if got := versionOf(tc.bi); got != tc.want {
			t.Errorf("versionOf(%+v) = %q, want %q", tc.bi, got, tc.want)
		}
	}
}

package config

import (
	"strings"
	"testing"
)

// Keys are case-insensitive, so "ttl" and "TTL" in one mapping are one key
// given twice: YAML refuses a key repeated as written, and the proxy
// refuses it repeated in another case rather than keep one of the two.
func TestKeyGivenTwiceInAnotherCaseIsRefused(t *testing.T) {
	file := writeFile(t, upstreamOnly+"defaults:\n  ttl: 1h\n  TTL: 2h\nroutes:\n  - match: \"POST /a\"\n    Match: \"POST /b\"\n")
	_, err := Load(Source{File: file})
	if err == nil {
		t.Fatal("Load accepted ttl and TTL in one mapping")
	}
	want := file + `:5: defaults.ttl: "TTL" repeats "ttl" of line 4: keys are case-insensitive; keep one`
	if got := strings.Split(err.Error(), "\n")[0]; got != want {
		t.Errorf("problem = %q\nwant      %q", got, want)
	}
	// Apart, in two mappings, they are two keys.
	if _, err := Load(Source{File: writeFile(t, upstreamOnly+"defaults:\n  TTL: 2h\nroutes:\n  - match: \"POST /a\"\n    ttl: 1h\n")}); err != nil {
		t.Errorf("one spelling a mapping: %v", err)
	}
}

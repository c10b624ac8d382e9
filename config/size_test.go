package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/bytesize"
)

func TestSizeFromYAMLInteger(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+"defaults:\n  max_response_body: 2048\n")})
	if got, want := cfg.Defaults.MaxResponseBody, 2*bytesize.KiB; got != want {
		t.Errorf("max_response_body = %d, want %d", got, want)
	}
}

// A size or a whole number reads the same from the file, the environment,
// a flag and the routes document: decimal, a size with a binary suffix.
// YAML's own number forms (hexadecimal, octal, underscores, exponents)
// are refused from the file as from the environment, and 020 is twenty
// everywhere, not YAML's sixteen.
func TestNumbersReadTheSameFromEverySource(t *testing.T) {
	type outcome struct {
		size, detached int64
		refused        bool
	}
	for _, given := range []string{"2048", "020", "+16", "2KiB", "0x10", "0o20", "0b11", "1_000", "1e3", "16.0", "1.5"} {
		detached := given // a whole number: the same rule, without a suffix
		if strings.HasSuffix(given, "KiB") {
			detached = "3"
		}
		load := func(src Source) outcome {
			cfg, err := Load(src)
			if err != nil {
				return outcome{refused: true}
			}
			size := cfg.Defaults.MaxResponseBody
			if len(cfg.Routes) == 1 {
				size = cfg.Routes[0].Policy.MaxResponseBody
			}
			return outcome{size: size, detached: int64(cfg.Upstream.MaxDetached)}
		}
		file := load(Source{File: writeFile(t, "upstream:\n  url: http://127.0.0.1:3000\n  max_detached: "+detached+"\ndefaults:\n  max_response_body: "+given+"\n")})
		env := load(Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_UPSTREAM_MAX_DETACHED=" + detached,
			"IDEMPOTENCY_PROXY_DEFAULTS_MAX_RESPONSE_BODY=" + given,
		}})
		flags := load(Source{Overrides: map[string]string{
			"upstream.url": "http://127.0.0.1:3000", "upstream.max_detached": detached, "defaults.max_response_body": given,
		}})
		routes := load(Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_UPSTREAM_MAX_DETACHED=" + detached,
			`IDEMPOTENCY_PROXY_ROUTES=[{"match": "POST /v1/charges", "max_response_body": ` + given + `}]`,
		}})
		if file != env || flags != env || routes != env {
			t.Errorf("%s: file %+v, environment %+v, flags %+v, routes document %+v; want one reading", given, file, env, flags, routes)
		}
		wantRefused := strings.ContainsAny(given, "xob_e.")
		if env.refused != wantRefused {
			t.Errorf("%s: refused %v, want %v", given, env.refused, wantRefused)
		}
	}
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+"defaults:\n  max_response_body: 020\n")})
	if got := cfg.Defaults.MaxResponseBody; got != 20 {
		t.Errorf("max_response_body: 020 = %d, want 20", got)
	}
}

// A number the file writes another way is refused with the text it wrote.
func TestHexadecimalSizeInFileIsRefusedAsWritten(t *testing.T) {
	_, err := Load(Source{File: writeFile(t, upstreamOnly+"defaults:\n  max_response_body: 0x10\n")})
	if err == nil || !strings.Contains(err.Error(), `defaults.max_response_body: invalid size "0x10"`) {
		t.Errorf("Load = %v, want max_response_body refused as \"0x10\"", err)
	}
}

// A number merged from an anchor, or set by a dotted key, is read as
// written too: 020 is twenty wherever YAML puts it, the mapping's own key
// wins over a merged one and an earlier merged mapping over a later one,
// and a hexadecimal size merged into a route is refused as it is written
// directly.
func TestNumbersMergedOrDottedReadAsWritten(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+`defaults:
  <<: &limits
    max_response_body: 020
routes:
  - match: POST /a
    <<: *limits
  - match: POST /b
    <<: [{max_response_body: 030}, {max_response_body: 0x10}]
  - match: POST /c
    max_response_body: 040
    <<: *limits
`)})
	got := []int64{cfg.Defaults.MaxResponseBody}
	for _, r := range cfg.Routes {
		got = append(got, r.Policy.MaxResponseBody)
	}
	if want := []int64{20, 20, 30, 40}; !slices.Equal(got, want) {
		t.Errorf("max_response_body of the defaults and routes a, b, c = %v, want %v", got, want)
	}
	dotted := mustLoad(t, Source{File: writeFile(t, upstreamOnly+"defaults.max_response_body: 020\n")})
	if got := dotted.Defaults.MaxResponseBody; got != 20 {
		t.Errorf("defaults.max_response_body: 020 = %d, want 20", got)
	}
	_, err := Load(Source{File: writeFile(t, upstreamOnly+"defaults:\n  ttl: 1h\nroutes:\n  - match: POST /a\n    <<: {max_response_body: 0x10}\n")})
	if err == nil || !strings.Contains(err.Error(), `routes[0].max_response_body: invalid size "0x10"`) {
		t.Errorf("Load = %v, want the merged max_response_body refused as \"0x10\"", err)
	}
}

// A number keeps its text only from the node it was decoded from: text
// that decodes to another number leaves the number viper read as it is,
// so a document that differs from the tree (a file rewritten between two
// reads, keys that collide in another case) cannot put one value's text in
// place of another.
func TestNumberKeepsOnlyItsOwnText(t *testing.T) {
	tree := map[string]any{"defaults": map[string]any{"max_response_body": 10, "ttl": "1h"}, "upstream": map[string]any{"max_detached": 16}}
	keepNumberText([]byte("defaults:\n  max_response_body: 1048576\nupstream:\n  max_detached: 0x10\n"), tree)
	want := map[string]any{"defaults": map[string]any{"max_response_body": 10, "ttl": "1h"}, "upstream": map[string]any{"max_detached": literal("0x10")}}
	if !reflect.DeepEqual(tree, want) {
		t.Errorf("tree = %v, want %v", tree, want)
	}
}

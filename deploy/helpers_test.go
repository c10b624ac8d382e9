// Package deploy_test checks the deployment examples against the code they
// describe: metric and outcome names against the proxy's registry, the
// Kubernetes sidecar against the ports, probes and config the binary uses,
// and the Dockerfile's build command against the documented one.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/idempotency-proxy/idempotency-proxy/admin"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// repoRoot is the module root; go test runs in the package directory.
const repoRoot = ".."

// metricNameRE finds metric names in PromQL: the proxy's own and the Go and
// process collectors' that the binary also registers.
var metricNameRE = regexp.MustCompile(`\b(?:idempotency_proxy|go|process)_[a-z0-9_]+\b`)

// outcomeMatcherRE finds outcome label matchers: outcome="x", outcome=~"x|y".
var outcomeMatcherRE = regexp.MustCompile(`\boutcome\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)

// exposedFamilies returns the metric families the binary exposes, by name,
// built the way main builds its registry (with the memory store's size
// metrics, which the Redis store does not have).
func exposedFamilies(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := proxy.NewMetrics(reg, "test")
	// A route in shadow mode has series of its own.
	shadow := proxy.DefaultPolicy()
	shadow.Mode = proxy.ModeShadow
	st := memory.New(memory.Options{})
	defer st.Close()
	if _, err := proxy.New(proxy.Options{Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Store: st, Metrics: m, Default: shadow}); err != nil {
		t.Fatalf("a handler with a shadow route: %v", err)
	}
	admin.NewMetrics(reg)
	admin.RegisterStoreStats(reg, st)                                      // the memory store's size
	admin.RegisterReplicaAck(reg, func() (uint64, uint64) { return 0, 0 }) // a Redis store's
	reg.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	fams := make(map[string]dto.MetricType, len(mfs))
	for _, mf := range mfs {
		fams[mf.GetName()] = mf.GetType()
	}
	return fams
}

// checkMetricNames fails for every metric name in expr that the binary does
// not expose. Histogram series names (_bucket, _sum, _count) resolve to their
// family.
func checkMetricNames(t *testing.T, where, expr string, fams map[string]dto.MetricType) []string {
	t.Helper()
	var used []string
	for _, name := range metricNameRE.FindAllString(expr, -1) {
		fam, ok := familyOf(name, fams)
		if !ok {
			t.Errorf("%s: metric %q is not exposed by idempotency-proxy", where, name)
			continue
		}
		used = append(used, fam)
	}
	return used
}

func familyOf(series string, fams map[string]dto.MetricType) (string, bool) {
	if _, ok := fams[series]; ok {
		return series, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(series, suffix)
		if !found {
			continue
		}
		if typ, ok := fams[base]; ok && (typ == dto.MetricType_HISTOGRAM || (suffix != "_bucket" && typ == dto.MetricType_SUMMARY)) {
			return base, true
		}
	}
	return "", false
}

// checkOutcomes fails for every outcome label value in expr that is not one
// of proxy.Outcomes, and returns the values used.
func checkOutcomes(t *testing.T, where, expr string) []string {
	t.Helper()
	var used []string
	for _, m := range outcomeMatcherRE.FindAllStringSubmatch(expr, -1) {
		for v := range strings.SplitSeq(m[1], "|") {
			if !slices.Contains(proxy.Outcomes(), proxy.Outcome(v)) {
				t.Errorf("%s: outcome %q is not one of proxy.Outcomes", where, v)
				continue
			}
			used = append(used, v)
		}
	}
	return used
}

// yamlDocs decodes every document of a multi-document YAML file into a
// generic value.
func yamlDocs(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	// A YAML stream has one document per separator; 1000 bounds a runaway file.
	for range 1000 {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(docs)+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	t.Fatalf("%s: more than 1000 documents", path)
	return nil
}

// decodeYAML decodes one YAML file into v, rejecting fields v does not
// know when strict is set.
func decodeYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestEveryFileParses makes sure no file under deploy/ is broken or of a
// kind nothing here checks.
func TestEveryFileParses(t *testing.T) {
	var seen int
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		seen++
		t.Run(path, func(t *testing.T) {
			switch filepath.Ext(path) {
			case ".yaml", ".yml":
				if docs := yamlDocs(t, path); len(docs) == 0 {
					t.Errorf("%s: no YAML document", path)
				}
			case ".json":
				var v map[string]any
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(data, &v); err != nil {
					t.Errorf("%s: %v", path, err)
				}
			case ".go":
			default:
				t.Errorf("%s: no check covers this kind of file", path)
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 8 {
		t.Errorf("walked %d files under deploy/, want at least 8", seen)
	}
}

// markdownAnchors returns the GitHub anchors of the headings in a Markdown
// file: lower case, spaces to dashes, punctuation other than - and _ dropped.
func markdownAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	inCode := false
	for line := range strings.Lines(string(data)) {
		// "# comment" in a fenced shell block is not a heading.
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

package deploy_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

const (
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
	promConfigFile = "prometheus/prometheus.yml"
	operatingDoc   = repoRoot + "/docs/operating.md"
)

// containerMatcherRE finds kube-state-metrics container selectors.
var containerMatcherRE = regexp.MustCompile(`\bcontainer="([^"]*)"`)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []rule {
	t.Helper()
	var rf ruleFile
	decodeYAML(t, alertsFile, &rf, true)
	var rules []rule
	for _, g := range rf.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

func TestAlertRules(t *testing.T) {
	fams := exposedFamilies(t)
	anchors := markdownAnchors(t, operatingDoc)
	rules := loadAlerts(t)

	var names, outcomes []string
	for _, r := range rules {
		t.Run(r.Alert, func(t *testing.T) {
			if r.Alert == "" {
				t.Fatalf("rule with expr %q has no alert name", r.Expr)
			}
			checkMetricNames(t, r.Alert, r.Expr, fams)
			for _, m := range containerMatcherRE.FindAllStringSubmatch(r.Expr, -1) {
				if m[1] != proxyContainerName {
					t.Errorf("selects container %q, want %q (deployment.yaml)", m[1], proxyContainerName)
				}
			}
			outcomes = append(outcomes, checkOutcomes(t, r.Alert, r.Expr)...)
			if _, err := model.ParseDuration(r.For); err != nil || r.For == "" {
				t.Errorf("for = %q, want a duration: %v", r.For, err)
			}
			if sev := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, sev) {
				t.Errorf("labels.severity = %q, want critical, warning or info", sev)
			}
			for _, key := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[key]) == "" {
					t.Errorf("annotations.%s is empty", key)
				}
			}
			// One base for every link, which the runbook_base external
			// label replaces (deploy/prometheus/alerts.yml says how).
			base, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "}}#")
			if base+"}}" != runbookBase || !anchors[anchor] {
				t.Errorf("runbook_url = %q, want %s#<a heading of docs/operating.md>", r.Annotations["runbook_url"], runbookBase)
			}
		})
		names = append(names, r.Alert)
	}

	// The alerts operators were promised (docs/operating.md describes each).
	for _, want := range []string{
		"IdempotencyProxyDown", "IdempotencyProxyNotReady", "IdempotencyProxyStoreErrors",
		"IdempotencyProxyFailOpenBypass", "IdempotencyProxyFailClosedRejections",
		"IdempotencyProxyLockLost", "IdempotencyProxyHighConflictRate", "IdempotencyProxyUpstreamErrors",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("alert %s missing from %s", want, alertsFile)
		}
	}
	for _, want := range []string{"store_unavailable_bypassed", "store_unavailable_rejected", "conflict", "upstream_error"} {
		if !slices.Contains(outcomes, want) {
			t.Errorf("no alert watches outcome %q", want)
		}
	}
}

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName        string `yaml:"job_name"`
		RelabelConfigs []struct {
			SourceLabels []string `yaml:"source_labels"`
			Action       string   `yaml:"action"`
			Regex        string   `yaml:"regex"`
		} `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheusConfig checks what promtool cannot: that the scrape jobs
// are the ones the alerts select, and that the Kubernetes job keeps exactly
// the proxy's admin port of deployment.yaml.
func TestPrometheusConfig(t *testing.T) {
	var cfg promConfig
	decodeYAML(t, promConfigFile, &cfg, false)

	if !slices.Contains(cfg.RuleFiles, filepath.Base(alertsFile)) {
		t.Errorf("rule_files = %q, want it to load %s", cfg.RuleFiles, filepath.Base(alertsFile))
	}

	var jobRE *regexp.Regexp
	for _, r := range loadAlerts(t) {
		if r.Alert == "IdempotencyProxyDown" {
			m := regexp.MustCompile(`job=~"([^"]+)"`).FindStringSubmatch(r.Expr)
			if m == nil {
				t.Fatalf("IdempotencyProxyDown expr %q selects no job", r.Expr)
			}
			jobRE = regexp.MustCompile("^(?:" + m[1] + ")$")
		}
	}
	if jobRE == nil {
		t.Fatal("no IdempotencyProxyDown alert")
	}

	proxyContainer, _ := deploymentContainers(t)
	adminTarget := proxyContainer.Name + ";" + proxyContainer.portName(t, adminPort)
	var keepsAdmin bool
	for _, sc := range cfg.ScrapeConfigs {
		if !jobRE.MatchString(sc.JobName) {
			t.Errorf("job %q is not selected by IdempotencyProxyDown (%s)", sc.JobName, jobRE)
		}
		for _, rc := range sc.RelabelConfigs {
			// Prometheus anchors relabel regexes and uses RE2, as Go does.
			re, err := regexp.Compile("^(?:" + rc.Regex + ")$")
			if err != nil {
				t.Errorf("job %s: regex %q: %v", sc.JobName, rc.Regex, err)
				continue
			}
			if rc.Action == "keep" && slices.Contains(rc.SourceLabels, "__meta_kubernetes_pod_container_port_name") {
				keepsAdmin = true
				if !re.MatchString(adminTarget) {
					t.Errorf("job %s keeps %q, which does not match the proxy's admin port %q", sc.JobName, rc.Regex, adminTarget)
				}
			}
		}
	}
	if !keepsAdmin {
		t.Error("no scrape job keeps only the proxy container's admin port")
	}
}

// TestPromtool runs promtool over the rules, their unit tests and the
// configuration when promtool is installed (Debian: package prometheus).
func TestPromtool(t *testing.T) {
	// The alerts are promises (docs/guarantees.md): CI installs promtool
	// and must not pass without running it.
	promtool := testbin.Tool(t, "promtool", "Debian package prometheus")
	tests := []struct {
		name string
		args []string
	}{
		{name: "check rules", args: []string{"check", "rules", alertsFile}},
		{name: "test rules", args: []string{"test", "rules", alertTestsFile}},
		{name: "check config", args: []string{"check", "config", promConfigFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.CommandContext(t.Context(), promtool, tt.args...).CombinedOutput()
			// Debian's promtool is built without Kubernetes discovery.
			if err != nil && strings.Contains(string(out), "field kubernetes_sd_configs not found") {
				t.Skipf("this promtool lacks kubernetes_sd_configs:\n%s", out)
			}
			if err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(tt.args, " "), err, out)
			}
		})
	}
}

// runbookBase starts every alert's runbook_url: the runbook_base external
// label when Prometheus sets one, else the repository's operating guide.
const runbookBase = `{{ or $externalLabels.runbook_base "https://github.com/idempotency-proxy/idempotency-proxy/blob/main/docs/operating.md" }}`

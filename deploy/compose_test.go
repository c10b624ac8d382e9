package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/config"
)

// No container runtime runs where the tests do, so the compose example is
// checked the way the Dockerfile is: parsed, and held against the files and
// configuration keys it relies on.

const (
	composeFile        = "examples/compose.yaml"
	upstreamDockerfile = "examples/upstream/Dockerfile"
	redisPort          = 6379
)

// composeService is the part of a Compose service these checks read. The
// fields Compose allows in two syntaxes are kept generic and normalised by
// the methods below.
type composeService struct {
	Build       any    `yaml:"build"` // "dir" or {context, dockerfile}
	Image       string `yaml:"image"`
	Command     any    `yaml:"command"`     // "a b c" or [a, b, c]
	Environment any    `yaml:"environment"` // {K: v} or ["K=v"]
	Ports       []any  `yaml:"ports"`       // "[ip:][host:]container[/proto]" or {target, published}
	Expose      []any  `yaml:"expose"`
	DependsOn   any    `yaml:"depends_on"` // [svc] or {svc: {condition}}
}

type composeFileT struct {
	Services map[string]composeService `yaml:"services"`
}

// dockerfile is the repository path of the Dockerfile the service builds,
// "" when it builds nothing.
func (s composeService) dockerfile(t *testing.T) string {
	t.Helper()
	ctx, file := "", "Dockerfile"
	switch b := s.Build.(type) {
	case nil:
		return ""
	case string:
		ctx = b
	case map[string]any:
		ctx, _ = b["context"].(string)
		if f, ok := b["dockerfile"].(string); ok {
			file = f
		}
	default:
		t.Fatalf("build: unexpected %T", s.Build)
	}
	// Compose resolves context against the compose file's directory, and
	// dockerfile against the context.
	return filepath.ToSlash(filepath.Join(filepath.Dir(composeFile), ctx, file))
}

func (s composeService) env(t *testing.T) []string {
	t.Helper()
	var out []string
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			out = append(out, k+"="+fmt.Sprint(v))
		}
	case []any:
		for _, kv := range e {
			out = append(out, fmt.Sprint(kv))
		}
	default:
		t.Fatalf("environment: unexpected %T", s.Environment)
	}
	slices.Sort(out)
	return out
}

func (s composeService) command(t *testing.T) []string {
	t.Helper()
	switch c := s.Command.(type) {
	case nil:
		return nil
	case string:
		return strings.Fields(c)
	case []any:
		out := make([]string, len(c))
		for i, a := range c {
			out[i] = fmt.Sprint(a)
		}
		return out
	default:
		t.Fatalf("command: unexpected %T", s.Command)
		return nil
	}
}

// publishedContainerPorts are the container ports published on the host.
func (s composeService) publishedContainerPorts(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, p := range s.Ports {
		var target string
		switch p := p.(type) {
		case string:
			parts := strings.Split(p, ":")
			if len(parts) < 2 {
				continue // a container port alone is published on a random host port
			}
			target, _, _ = strings.Cut(parts[len(parts)-1], "/")
		case map[string]any:
			if p["published"] == nil {
				continue
			}
			target = fmt.Sprint(p["target"])
		default:
			target = fmt.Sprint(p)
		}
		n, err := strconv.Atoi(target)
		if err != nil {
			t.Errorf("port %v: container port %q is not a number", p, target)
			continue
		}
		out = append(out, n)
	}
	return out
}

func (s composeService) dependsOn() []string {
	var out []string
	switch d := s.DependsOn.(type) {
	case []any:
		for _, n := range d {
			out = append(out, fmt.Sprint(n))
		}
	case map[string]any:
		for n := range d {
			out = append(out, n)
		}
	}
	return out
}

// serviceBuilding returns the name of the one service that builds
// dockerfile.
func serviceBuilding(t *testing.T, services map[string]composeService, dockerfile string) string {
	t.Helper()
	var names []string
	for name, s := range services {
		if s.dockerfile(t) == dockerfile {
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("%s: services building %s: %q, want exactly one", composeFile, dockerfile, names)
	}
	return names[0]
}

func TestComposeExample(t *testing.T) {
	var cf composeFileT
	decodeYAML(t, filepath.Join(repoRoot, composeFile), &cf, false)
	proxyName := serviceBuilding(t, cf.Services, "Dockerfile")
	upstreamName := serviceBuilding(t, cf.Services, upstreamDockerfile)
	proxySvc := cf.Services[proxyName]

	t.Run("proxy publishes both listeners", func(t *testing.T) {
		got := proxySvc.publishedContainerPorts(t)
		for _, want := range []int{proxyPort, adminPort} {
			if !slices.Contains(got, want) {
				t.Errorf("service %s publishes container ports %v, want %d", proxyName, got, want)
			}
		}
	})

	// The image runs with config.example.yaml (see TestDockerfile), so the
	// service's environment is loaded on top of it, as the binary would.
	cfg, err := config.Load(config.Source{
		File: filepath.Join(repoRoot, "config.example.yaml"),
		Env:  proxySvc.env(t),
	})
	if err != nil {
		t.Fatalf("service %s: the image's configuration with its environment is invalid:\n%v", proxyName, err)
	}

	t.Run("proxy points at the demo upstream", func(t *testing.T) {
		u := cfg.Upstream.URL
		if u.Hostname() != upstreamName || u.Port() != strconv.Itoa(appPort) {
			t.Errorf("upstream.url = %s, want http://%s:%d (service %s)", u.Redacted(), upstreamName, appPort, upstreamName)
		}
		if !slices.Contains(proxySvc.dependsOn(), upstreamName) {
			t.Errorf("service %s does not depend_on %s", proxyName, upstreamName)
		}
	})

	t.Run("demo upstream listens where the proxy sends", func(t *testing.T) {
		stages := dockerStages(t, filepath.Join(repoRoot, upstreamDockerfile))
		final := stages[len(stages)-1]
		entry := instructions(final, "ENTRYPOINT")
		var argv []string
		if len(entry) != 1 || json.Unmarshal([]byte(entry[0]), &argv) != nil {
			t.Fatalf("%s: ENTRYPOINT %q, want one exec-form entrypoint", upstreamDockerfile, entry)
		}
		i := slices.Index(argv, "--listen")
		if i < 0 || i+1 >= len(argv) || argv[i+1] != ":"+strconv.Itoa(appPort) {
			t.Errorf("%s: ENTRYPOINT %q, want --listen :%d", upstreamDockerfile, argv, appPort)
		}
		checkBuildContext(t, upstreamDockerfile, stages, "examples/upstream/main.go")
		var built bool
		for _, run := range instructions(stages[0], "RUN") {
			built = built || strings.Contains(run, "go build") && strings.HasSuffix(run, "./examples/upstream")
		}
		if !built {
			t.Errorf("%s: the build stage does not go build ./examples/upstream", upstreamDockerfile)
		}
	})

	t.Run("proxy stores in the Redis service", func(t *testing.T) {
		if cfg.Store.Kind != config.StoreRedis {
			t.Fatalf("store.kind = %q, want redis", cfg.Store.Kind)
		}
		u, err := url.Parse(cfg.Store.Redis.URL)
		if err != nil {
			t.Fatal(err)
		}
		redisSvc, ok := cf.Services[u.Hostname()]
		if !ok {
			t.Fatalf("store.redis.url %s: no service %q", u.Redacted(), u.Hostname())
		}
		if !strings.HasPrefix(redisSvc.Image, "redis:") {
			t.Errorf("service %s runs %q, want a redis image", u.Hostname(), redisSvc.Image)
		}
		if p := u.Port(); p != "" && p != strconv.Itoa(redisPort) {
			t.Errorf("store.redis.url port %s, want %d", p, redisPort)
		}
		if !slices.Contains(proxySvc.dependsOn(), u.Hostname()) {
			t.Errorf("service %s does not depend_on %s", proxyName, u.Hostname())
		}
		// Evicting a lease or a recorded response would let a retry
		// execute twice: the proxy needs noeviction.
		cmd := redisSvc.command(t)
		i := slices.Index(cmd, "--maxmemory-policy")
		if len(cmd) == 0 || cmd[0] != "redis-server" || i < 0 || i+1 >= len(cmd) || cmd[i+1] != "noeviction" {
			t.Errorf("service %s command %q, want redis-server --maxmemory-policy noeviction", u.Hostname(), cmd)
		}
	})
}

// checkBuildContext fails for every file a Dockerfile copies from the
// repository (plus extra) that does not exist or that .dockerignore excludes.
func checkBuildContext(t *testing.T, dockerfile string, stages [][]instruction, extra ...string) {
	t.Helper()
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	sources := extra
	for _, stage := range stages {
		for _, c := range instructions(stage, "COPY") {
			if strings.HasPrefix(c, "--from") {
				continue
			}
			f := strings.Fields(c)
			sources = append(sources, f[:len(f)-1]...)
		}
	}
	for _, src := range sources {
		if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
			t.Errorf("%s copies %s: %v", dockerfile, src, err)
		}
		for pattern := range strings.Lines(string(ignore)) {
			pattern = strings.TrimSpace(pattern)
			if pattern == "" || strings.HasPrefix(pattern, "#") {
				continue
			}
			if ok, _ := filepath.Match(pattern, src); ok {
				t.Errorf("%s: .dockerignore pattern %q excludes %s", dockerfile, pattern, src)
			}
		}
	}
}

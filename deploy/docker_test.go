package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// buildCommand is the documented way to build the binary; the Dockerfile,
// the README and docs/operating.md must all say exactly this.
const buildCommand = `CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags "-s -w -X main.version=$VERSION" -o idempotency-proxy ./cmd/idempotency-proxy`

type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY…
	args string
}

// dockerStages splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments.
func dockerStages(t *testing.T, path string) [][]instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]instruction
	var logical strings.Builder
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && logical.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			logical.WriteString(cont + " ")
			continue
		}
		logical.WriteString(line)
		cmd, args, _ := strings.Cut(strings.TrimSpace(logical.String()), " ")
		logical.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " ")}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s: %s before the first FROM", path, in.cmd)
			}
			continue
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

func instructions(stage []instruction, cmd string) []string {
	var out []string
	for _, in := range stage {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	stages := dockerStages(t, filepath.Join(repoRoot, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a runtime stage", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	t.Run("build", func(t *testing.T) {
		if !slices.ContainsFunc(instructions(build, "ARG"), func(a string) bool { return strings.HasPrefix(a, "VERSION") }) {
			t.Error("builder stage has no ARG VERSION")
		}
		var got []string
		re := regexp.MustCompile(`CGO_ENABLED=\S+ go build .*$`)
		for _, run := range instructions(build, "RUN") {
			if m := re.FindString(run); m != "" {
				got = append(got, m)
			}
		}
		if len(got) != 1 || got[0] != buildCommand {
			t.Errorf("go build in Dockerfile = %q, want exactly [%s]", got, buildCommand)
		}
	})

	t.Run("documented build command", func(t *testing.T) {
		for _, doc := range []string{"README.md", "docs/operating.md"} {
			data, err := os.ReadFile(filepath.Join(repoRoot, doc))
			if os.IsNotExist(err) && doc == "README.md" {
				t.Logf("%s does not exist yet; only the constant was checked", doc)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), buildCommand) {
				t.Errorf("%s does not contain the build command %s", doc, buildCommand)
			}
		}
	})

	t.Run("runtime", func(t *testing.T) {
		from := instructions(final, "FROM")[0]
		if !strings.HasPrefix(from, "gcr.io/distroless/static") && !strings.HasPrefix(from, "scratch") {
			t.Errorf("runtime stage FROM %s, want distroless/static or scratch for a static binary", from)
		}
		users := instructions(final, "USER")
		if len(users) == 0 {
			t.Fatal("runtime stage sets no USER; it would run as root")
		}
		if uid, _, _ := strings.Cut(users[len(users)-1], ":"); uid == "0" || uid == "root" || strings.Trim(uid, "0123456789") != "" {
			t.Errorf("USER %s, want a numeric non-root uid so runAsNonRoot can verify it", users[len(users)-1])
		}
		var exposed []string
		for _, e := range instructions(final, "EXPOSE") {
			exposed = append(exposed, strings.Fields(e)...)
		}
		for _, want := range []string{"8080", "9090"} {
			if !slices.Contains(exposed, want) {
				t.Errorf("EXPOSE %q, want %s", exposed, want)
			}
		}
		if !slices.Contains(instructions(final, "COPY"), "config.example.yaml "+configMountDir+"/config.yaml") {
			t.Errorf("runtime stage does not COPY config.example.yaml to %s/config.yaml", configMountDir)
		}
		entry := instructions(final, "ENTRYPOINT")
		var argv []string
		if len(entry) != 1 || json.Unmarshal([]byte(entry[0]), &argv) != nil {
			t.Fatalf("ENTRYPOINT %q, want one exec-form (JSON) entrypoint so signals reach the binary", entry)
		}
		i := slices.Index(argv, "--config")
		if i < 0 || i+1 >= len(argv) || argv[i+1] != configMountDir+"/config.yaml" {
			t.Errorf("ENTRYPOINT %q, want --config %s/config.yaml", argv, configMountDir)
		}
	})

	// Every file the build copies from the context must exist and must not
	// be excluded by .dockerignore.
	t.Run("context", func(t *testing.T) {
		ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
		if err != nil {
			t.Fatal(err)
		}
		var sources []string
		for _, stage := range stages {
			for _, c := range instructions(stage, "COPY") {
				if strings.HasPrefix(c, "--from") {
					continue
				}
				f := strings.Fields(c)
				sources = append(sources, f[:len(f)-1]...)
			}
		}
		sources = append(sources, "cmd/idempotency-proxy/main.go")
		for _, src := range sources {
			if src == "." {
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
				t.Errorf("build copies %s: %v", src, err)
			}
			for pattern := range strings.Lines(string(ignore)) {
				pattern = strings.TrimSpace(pattern)
				if ok, _ := filepath.Match(pattern, src); ok && !strings.HasPrefix(pattern, "#") {
					t.Errorf(".dockerignore pattern %q excludes %s", pattern, src)
				}
			}
		}
	})
}

package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tinyModule writes a module whose one test checks Add but not Sub.
func tinyModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":       "module tiny\n\ngo 1.26\n",
		"calc.go":      "package tiny\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Sub(a, b int) int { return a - b }\n",
		"calc_test.go": "package tiny\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add(2, 3) != 5\")\n\t}\n}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunnerTellsCaughtFromSurvivingAndBrokenMutations(t *testing.T) {
	dir := tinyModule(t)
	r := runner{dir: dir, timeout: time.Minute, out: io.Discard}
	tests := []struct {
		name string
		m    mutation
		want string
	}{
		{"caught", mutation{File: "calc.go", Find: "return a + b", Replace: "return a - b", Package: "./", Test: "TestAdd"}, killed},
		{"survives", mutation{File: "calc.go", Find: "return a - b", Replace: "return a + b", Package: "./", Test: "TestAdd"}, survived},
		{"does not compile", mutation{File: "calc.go", Find: "return a + b", Replace: "return a +", Package: "./", Test: "TestAdd"}, broken},
		{"text not found", mutation{File: "calc.go", Find: "return a * b", Replace: "return 0", Package: "./", Test: "TestAdd"}, broken},
	}
	before, err := os.ReadFile(filepath.Join(dir, "calc.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.try(tt.m); got.word != tt.want {
				t.Errorf("verdict = %s (%s), want %s", got.word, got.why, tt.want)
			}
			after, err := os.ReadFile(filepath.Join(dir, "calc.go"))
			if err != nil {
				t.Fatal(err)
			}
			if string(after) != string(before) {
				t.Errorf("calc.go was not restored:\n%s", after)
			}
		})
	}
}

func TestBaselineRefusesATestThatFailsUnmutated(t *testing.T) {
	dir := tinyModule(t)
	if err := os.WriteFile(filepath.Join(dir, "calc.go"), []byte("package tiny\n\nfunc Add(a, b int) int { return 0 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runner{dir: dir, timeout: time.Minute, out: io.Discard}
	err := r.baseline([]mutation{{Package: "./", Test: "TestAdd"}})
	if err == nil {
		t.Fatal("baseline passed although TestAdd fails without any mutation")
	}
	// Which test failed, and why, is said however long the output.
	for _, want := range []string{"--- FAIL: TestAdd", "calc_test.go:7: Add(2, 3) != 5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("baseline's error does not say %q:\n%v", want, err)
		}
	}
}

func TestFailuresKeepsTheFailingTestAndItsMessagesOnly(t *testing.T) {
	out := "=== RUN   TestA\n--- FAIL: TestA (0.33s)\n    a_test.go:29: with the replica up: 503, want 201\n    server.go:229: redis-server log (tail):\n        8728:M * Ready to accept connections\nFAIL\n"
	want := "--- FAIL: TestA (0.33s)\n    a_test.go:29: with the replica up: 503, want 201\n"
	if got := failures(out); got != want {
		t.Errorf("failures =\n%q\nwant\n%q", got, want)
	}
	if got := failures("ok  \tpkg\t0.1s\n"); got != "" {
		t.Errorf("failures of a passing run = %q, want none", got)
	}
}

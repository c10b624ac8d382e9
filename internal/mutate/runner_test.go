package main

import (
	"io"
	"os"
	"path/filepath"
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
	if err := r.baseline([]mutation{{Package: "./", Test: "TestAdd"}}); err == nil {
		t.Error("baseline passed although TestAdd fails without any mutation")
	}
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// The README's commands are the test's script: these helpers read them out
// of its ```sh blocks, so the README cannot drift from what the test runs.

// readme returns README.md from the module root.
func readme(t *testing.T) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// requestHandlingCommands is the shell commands of a section of
// docs/request-handling.md, as shellCommands splits them.
func requestHandlingCommands(t *testing.T, section string) [][][]string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "request-handling.md"))
	if err != nil {
		t.Fatal(err)
	}
	return shellCommands(t, markdownSection(t, string(doc), section))
}

// markdownSection returns the text under the "## title" heading, up to the
// next heading of that level; "" (with no heading) is what precedes the
// first one.
func markdownSection(t *testing.T, doc, title string) string {
	t.Helper()
	var out strings.Builder
	in := title == ""
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = strings.TrimSpace(line[3:]) == title
			continue
		}
		if in {
			out.WriteString(line)
		}
	}
	if out.Len() == 0 {
		t.Fatalf("README.md has no section %q", title)
	}
	return out.String()
}

// shellCommands returns the commands of the ```sh blocks of text, lines
// continued with a trailing backslash joined, each command a pipeline of
// argument lists.
func shellCommands(t *testing.T, text string) [][][]string {
	t.Helper()
	var cmds [][][]string
	inSh := false
	var pending strings.Builder
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inSh = !inSh && (trimmed == "```sh" || trimmed == "```shell" || trimmed == "```bash")
			continue
		}
		if !inSh {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			pending.WriteString(cont + " ")
			continue
		}
		pending.WriteString(trimmed)
		pipeline, err := shellWords(pending.String())
		if err != nil {
			t.Fatalf("README command %q: %v", pending.String(), err)
		}
		pending.Reset()
		if len(pipeline) > 0 {
			cmds = append(cmds, pipeline)
		}
	}
	return cmds
}

// shellWords splits one command line as sh would for the simple commands a
// README shows: words, '…' and "…" quoting, backslash escapes, comments and
// pipes. Anything it cannot run the same way (expansions, redirections,
// command lists) is an error, not a guess.
func shellWords(line string) ([][]string, error) {
	var (
		pipeline [][]string
		words    []string
		word     strings.Builder
		inWord   bool
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t':
			endWord()
		case r == '#' && !inWord:
			i = len(rs)
		case r == '|':
			endWord()
			if len(words) == 0 {
				return nil, fmt.Errorf("empty command before |")
			}
			pipeline, words = append(pipeline, words), nil
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated '")
			}
			word.WriteString(string(rs[i+1 : j]))
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				switch rs[j] {
				case '\\':
					if j+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[j+1]) {
						j++
					}
				case '$', '`':
					return nil, fmt.Errorf("expansion inside double quotes")
				}
				word.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, fmt.Errorf(`unterminated "`)
			}
			i = j
		case r == '\\' && i+1 < len(rs):
			inWord = true
			i++
			word.WriteRune(rs[i])
		case strings.ContainsRune("$`;&<>()", r):
			return nil, fmt.Errorf("%q is not supported here", r)
		default:
			inWord = true
			word.WriteRune(r)
		}
	}
	endWord()
	if len(words) > 0 {
		pipeline = append(pipeline, words)
	} else if len(pipeline) > 0 {
		return nil, fmt.Errorf("empty command after |")
	}
	return pipeline, nil
}

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string
	}{
		{`go run ./examples/upstream`, `[[go run ./examples/upstream]]`},
		{`curl -H 'Idempotency-Key: k 1' -d '{"a":1}' http://x  # comment`, `[[curl -H Idempotency-Key: k 1 -d {"a":1} http://x]]`},
		{`curl -s "http://x/y\"z" | grep foo_total`, `[[curl -s http://x/y"z] [grep foo_total]]`},
		{`a\ b`, `[[a b]]`},
		{`# only a comment`, `[]`},
	} {
		got, err := shellWords(tc.line)
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("shellWords(%q) = %q, %v; want %s", tc.line, got, err, tc.want)
		}
	}
	for _, bad := range []string{`echo $HOME`, `a && b`, `a > f`, `'open`, `a |`} {
		if _, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q) accepted a line it cannot run faithfully", bad)
		}
	}
}

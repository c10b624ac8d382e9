// Package docs_test checks the documentation as a reader follows it: every
// relative link in README.md and docs/*.md leads to a file of the
// repository, and every #anchor to a heading of its target.
package docs_test

import (
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module root; go test runs in the package directory.
const repoRoot = ".."

var (
	// inlineLinkRE finds [text](target "title") and images; text may hold
	// one level of brackets and span lines.
	inlineLinkRE = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefRE finds reference definitions: [label]: target
	refDefRE = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	// codeSpanRE finds inline code, whose brackets are not links.
	codeSpanRE = regexp.MustCompile("``[^`]*``|`[^`\n]*`")
	// htmlAnchorRE finds explicit anchors: <a name="x"> or id="x".
	htmlAnchorRE = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:name|id)="([^"]+)"`)
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownFiles are the documents a reader follows links through.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, docs...)
}

func TestRelativeLinksResolve(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // by absolute path of a Markdown file
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(data))
		return anchors[path]
	}

	var checked int
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs(file)
		rel, _ := filepath.Rel(root, abs)
		for _, l := range links(string(data)) {
			where := rel + ":" + strconv.Itoa(l.line)
			if schemeRE.MatchString(l.target) || strings.HasPrefix(l.target, "//") {
				continue // absolute URL
			}
			checked++
			path, anchor, _ := strings.Cut(l.target, "#")
			target := abs
			if path != "" {
				target = filepath.Join(filepath.Dir(abs), filepath.FromSlash(path))
				if r, err := filepath.Rel(root, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
					t.Errorf("%s: link %q points outside the repository", where, l.target)
					continue
				}
				info, err := os.Stat(target)
				if err != nil {
					t.Errorf("%s: link %q: no such file in the repository", where, l.target)
					continue
				}
				if info.IsDir() && anchor != "" {
					t.Errorf("%s: link %q: an anchor on a directory", where, l.target)
					continue
				}
			}
			if anchor == "" {
				if target == abs {
					t.Errorf("%s: link %q is the document itself: say what the reader finds where", where, l.target)
				}
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				continue // GitHub's line anchors (#L10) and the like
			}
			if !anchorsOf(target)[anchor] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", where, l.target, filepath.Base(target), anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d relative links, want at least 20: is the link parser broken?", checked)
	}
}

// Documents are read where they live: a reference a reader cannot follow
// (a file outside the repository) is as broken as a dead link.
func TestNoReferenceOutsideTheRepository(t *testing.T) {
	// The product specification the project once cited lives outside the
	// repository; so did "the product contract" it named.
	outside := regexp.MustCompile(`(?i)\bSPEC\.md\b|product contract`)
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if outside.MatchString(line) {
				t.Errorf("%s:%d: refers to a document outside the repository: %q", filepath.Base(file), i+1, strings.TrimSpace(line))
			}
		}
	}
}

type link struct {
	target string
	line   int
}

// links returns the link targets of a Markdown document, outside code.
func links(doc string) []link {
	text := blankCode(doc)
	var out []link
	for _, re := range []*regexp.Regexp{inlineLinkRE, refDefRE} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			out = append(out, link{
				target: text[m[2]:m[3]],
				line:   1 + strings.Count(text[:m[2]], "\n"),
			})
		}
	}
	return out
}

// blankCode replaces fenced code blocks and inline code spans with spaces,
// keeping every offset and line break where it was.
func blankCode(doc string) string {
	var b strings.Builder
	for line, code := range fencedLines(doc) {
		if code {
			line = blank(line)
		}
		b.WriteString(line)
	}
	return codeSpanRE.ReplaceAllStringFunc(b.String(), blank)
}

// fencedLines yields every line of doc, and whether it belongs to a fenced
// code block (fences included).
func fencedLines(doc string) iter.Seq2[string, bool] {
	return func(yield func(string, bool) bool) {
		fence := ""
		for line := range strings.Lines(doc) {
			trimmed := strings.TrimLeft(line, " ")
			code := fence != ""
			switch {
			case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
				fence, code = trimmed[:3], true
			case fence != "" && strings.HasPrefix(trimmed, fence):
				fence = ""
			}
			if !yield(line, code) {
				return
			}
		}
	}
}

func blank(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' {
			return r
		}
		return ' '
	}, s)
}

// headingAnchors returns the anchors GitHub gives a document: one per ATX
// heading (slug of its text, "-1", "-2"… for repeats) and every explicit
// HTML name or id.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for line, code := range fencedLines(doc) {
		title, ok := atxHeading(line)
		if code || !ok {
			continue
		}
		slug := githubSlug(title)
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	for _, m := range htmlAnchorRE.FindAllStringSubmatch(doc, -1) {
		anchors[m[1]] = true
	}
	return anchors
}

// atxHeading returns the text of a "## Title ##" line; backticks and
// emphasis marks stay, as punctuation the slug drops.
func atxHeading(line string) (string, bool) {
	line = strings.TrimRight(line, "\r\n")
	indent := len(line) - len(strings.TrimLeft(line, " "))
	if indent > 3 {
		return "", false
	}
	line = line[indent:]
	level := len(line) - len(strings.TrimLeft(line, "#"))
	if level < 1 || level > 6 {
		return "", false
	}
	rest := line[level:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	if closing := strings.TrimRight(rest, "#"); closing != rest && (closing == "" || strings.HasSuffix(closing, " ")) {
		rest = strings.TrimSpace(closing)
	}
	return rest, true
}

// markdownLinkTextRE keeps the text of a link in a heading.
var markdownLinkTextRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// githubSlug is GitHub's heading anchor: the text lower-cased, links
// reduced to their text, every character but letters, digits, spaces,
// hyphens and underscores dropped, and spaces turned into hyphens.
func githubSlug(title string) string {
	title = markdownLinkTextRE.ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

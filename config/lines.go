package config

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// keyLines maps each key path of a YAML (or JSON) document to the line it
// is on, as problems name keys: lower case, routes[0].ttl. Keys merged from
// an anchor have no line of their own and are left out. twin is the first
// key a mapping repeats in another case ("ttl" and "TTL"): keys are
// case-insensitive, so it is one key given twice, which YAML refuses only
// when both are written alike.
func keyLines(doc []byte) (lines map[string]int, twin *caseTwin) {
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) != nil || root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil, nil
	}
	lines = map[string]int{}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		switch n.Kind {
		case yaml.MappingNode:
			seen := map[string]*yaml.Node{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.ShortTag() == "!!merge" {
					continue
				}
				path := join(prefix, strings.ToLower(k.Value))
				if first, ok := seen[path]; ok && twin == nil {
					twin = &caseTwin{path: path, first: first, again: k}
				}
				seen[path] = k
				lines[path] = k.Line
				walk(path, n.Content[i+1])
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				path := fmt.Sprintf("%s[%d]", prefix, i)
				lines[path] = item.Line
				walk(path, item)
			}
		}
	}
	walk("", root.Content[0])
	return lines, twin
}

// caseTwin is a key of a mapping given again in another case.
type caseTwin struct {
	path         string
	first, again *yaml.Node
}

// inFile is the problem of a twin in the file at path, naming both lines.
func (t *caseTwin) inFile(path string) *Problem {
	return &Problem{Path: t.path, File: path, Line: t.again.Line, Reason: fmt.Sprintf("%q repeats %q of line %d: keys are case-insensitive; keep one", t.again.Value, t.first.Value, t.first.Line)}
}

// reason is the problem of a twin in a document a variable gives, whose
// lines are not the file's.
func (t *caseTwin) reason() string {
	return fmt.Sprintf("%q repeats %q: keys are case-insensitive; keep one", t.again.Value, t.first.Value)
}

// yamlLine is the "yaml: line N: " yaml starts its syntax errors with.
var yamlLine = regexp.MustCompile(`^yaml: line \d+: `)

// syntaxProblem explains a document that is not valid YAML: the line it
// stops being valid on, quoted, and yaml's reason. yaml's own line is where
// the block around the error began, or the line before it ("line 2: did
// not find expected key" for a key indented wrong on line 3), so the line
// is found instead as the first at which the document, cut there, fails
// for the same reason. ok is false when doc parses.
func syntaxProblem(doc []byte) (line int, reason string, ok bool) {
	var n yaml.Node
	err := yaml.Unmarshal(doc, &n)
	if err == nil {
		return 0, "", false
	}
	reason = yamlLine.ReplaceAllString(err.Error(), "")
	text := strings.SplitAfter(string(doc), "\n")
	for i := range text {
		var prefix yaml.Node
		if e := yaml.Unmarshal([]byte(strings.Join(text[:i+1], "")), &prefix); e != nil && yamlLine.ReplaceAllString(e.Error(), "") == reason {
			return i + 1, fmt.Sprintf("%s, at %q", reason, strings.TrimRight(text[i], "\r\n")), true
		}
	}
	return 0, err.Error(), true
}

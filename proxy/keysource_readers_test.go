package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// readerCorpus is request bodies built to find where JSON readers part:
// repeated and case-variant names, escapes, numbers at the edges, a byte
// order mark, and texts that are almost JSON. The same seed gives the same
// corpus on every run.
func readerCorpus(n int) [][]byte {
	ids := []string{`"id"`, `"id"`, `"id"`, `"ID"`, `"Id"`, `"\u0069d"`, `"i\u0064"`, `"\u0049\u0044"`, "\"\u212ad\"", `"id "`, `"iD"`}
	others := []string{`"data"`, `"data"`, `"amount"`, `"type"`, `"x"`, `"Data"`}
	values := []string{
		`"ord_1"`, `"ord_9"`, `"ord_3"`, `"evt_1"`, `42`, `-0`, `"ord_1"`, `"ord_9"`, `"\u006frd_2"`, `"a\/b"`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `""`, `"` + strings.Repeat("k", 256) + `"`,
		`0`, `-0`, `7`, `-12`, `01`, `1.0`, `1e2`, `-0.0`, `9007199254740993`, `9007199254740992`, `9007199254740991`, `-9007199254740993`, `9223372036854775807`, `9223372036854775808`,
		`-9223372036854775808`, `1E400`, `true`, `null`, `NaN`, `Infinity`, `[]`, `{}`, `{"id":"in"}`, `"tab\there"`,
	}
	rng := rand.New(rand.NewPCG(21, 29))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	var object func(depth int) string
	object = func(depth int) string {
		var b strings.Builder
		b.WriteString("{")
		for m := range rng.IntN(4) + 1 {
			if m > 0 {
				b.WriteString(pick([]string{",", ", ", " ,\n"}))
			}
			name := pick(others)
			if rng.IntN(3) == 0 {
				name = pick(ids)
			}
			b.WriteString(name)
			b.WriteString(pick([]string{":", " : "}))
			if depth < 2 && (rng.IntN(6) == 0 || strings.EqualFold(name, `"data"`) && rng.IntN(3) > 0) {
				b.WriteString(object(depth + 1))
			} else {
				b.WriteString(pick(values))
			}
		}
		b.WriteString("}")
		return b.String()
	}
	corpus := make([][]byte, 0, n)
	for range n {
		body := object(0)
		switch rng.IntN(12) {
		case 0:
			body = "\xef\xbb\xbf" + body
		case 1:
			body += " " + object(0) // two texts
		case 2:
			body = body[:rng.IntN(len(body))] // cut short
		case 3:
			body = strings.Replace(body, "}", ",}", 1) // a trailing comma
		case 4:
			body = "[" + body + "]"
		}
		corpus = append(corpus, []byte(body))
	}
	return corpus
}

// readerAnswer is what a reader's script found in one body.
type readerAnswer struct {
	OK    bool   `json:"ok"`
	Found bool   `json:"found"`
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Exact *bool  `json:"exact"`
}

// readWith runs a reader script over the corpus and returns one answer per
// body. A reader that is not installed skips the test, or fails it when the
// CI environment variable is set.
func readWith(t *testing.T, corpus [][]byte, pointer, tool string, args ...string) []readerAnswer {
	t.Helper()
	path := testbin.Tool(t, tool, "")
	var in bytes.Buffer
	for _, body := range corpus {
		in.WriteString(base64.StdEncoding.EncodeToString(body))
		in.WriteByte('\n')
	}
	cmd := exec.Command(path, append(args, pointer)...)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, args, err, stderr.Bytes())
	}
	answers := make([]readerAnswer, 0, len(corpus))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var a readerAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("%s: %q: %v", tool, sc.Bytes(), err)
		}
		answers = append(answers, a)
	}
	if len(answers) != len(corpus) {
		t.Fatalf("%s answered %d bodies of %d", tool, len(answers), len(corpus))
	}
	return answers
}

// Whatever key a json: source takes from a body, Python's json and Node's
// JSON.parse read that key there too, or no key at all: the proxy never
// keys an operation by a value the upstream reads otherwise. (A name the
// proxy matches case-insensitively, as a Go upstream does, is no value to
// them; that costs a 422 at worst, never a replay of another operation.)
// No key is an integer JavaScript holds only approximately (beyond 2^53):
// Node would read two such keys as one number.
func TestJSONKeyIsReadAlikeByPythonAndNode(t *testing.T) {
	corpus := readerCorpus(3000)
	for _, pointer := range []string{"/id", "/data/id"} {
		readers := map[string][]readerAnswer{
			"python": readWith(t, corpus, pointer, "python3", "testdata/readers/python_read.py"),
			"node":   readWith(t, corpus, pointer, "node", "testdata/readers/node_read.js"),
		}
		sources := mustSources(t, "json:"+pointer)
		var keyed, refused, compared int
		for i, body := range corpus {
			key, _, err := requestKeyFrom(keyRequest("/", nil), sources, body, true)
			switch {
			case errors.Is(err, jsonread.ErrDuplicateName):
				refused++
				continue
			case err != nil:
				continue // no key, or an invalid one (400 invalid-key)
			}
			keyed++
			for name, answers := range readers {
				a := answers[i]
				if !a.OK || !a.Found {
					continue
				}
				compared++
				switch {
				case a.Kind == "other":
					t.Errorf("%s in %q: keyed %q, %s reads a value that is no key", pointer, body, key, name)
				case a.Exact != nil && !*a.Exact:
					t.Errorf("%s in %q: keyed %q, %s reads the integer only approximately, as %s", pointer, body, key, name, a.Key)
				case a.Key != key:
					t.Errorf("%s in %q: keyed %q, %s reads %q", pointer, body, key, name, a.Key)
				}
			}
		}
		t.Logf("%s: %d bodies, %d keyed, %d refused as ambiguous, %d keys compared", pointer, len(corpus), keyed, refused, compared)
		if keyed == 0 || refused == 0 || compared == 0 {
			t.Errorf("%s: the corpus keyed %d, refused %d, compared %d: it no longer tests anything", pointer, keyed, refused, compared)
		}
	}
}

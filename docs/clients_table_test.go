package docs_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
)

// The table of docs/clients.md is clients/contract.json as a reader sees it:
// every problem type the proxy answers is in one row with its status,
// whether it carries Retry-After, and the client's action, and every admin
// problem type is named.
func TestClientsTableIsTheContract(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("clients.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## What to do with each answer")
	end := strings.Index(doc[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("docs/clients.md has no section \"What to do with each answer\"")
	}
	section := doc[start : start+1+end]
	typeRE := regexp.MustCompile("`([a-z-]+)`")
	rows := map[string][]string{} // problem type → its row's cells
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 4 {
			continue
		}
		for _, m := range typeRE.FindAllStringSubmatch(cells[0], -1) {
			if _, dup := rows[m[1]]; dup {
				t.Errorf("problem %s is in two rows of the table", m[1])
			}
			rows[m[1]] = cells
		}
	}
	// The respond-async 202 has its row too, with the contract's action.
	accepted := false
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) == 4 && strings.TrimSpace(cells[1]) == "`"+strconv.Itoa(c.AcceptedAsync.Status)+"`" {
			accepted = true
			if got := strings.Trim(strings.Fields(cells[3])[0], "*:"); got != c.AcceptedAsync.Client {
				t.Errorf("the respond-async 202: the table says %s, the contract %s", got, c.AcceptedAsync.Client)
			}
			if got, want := strings.TrimSpace(cells[2]), map[bool]string{true: "yes", false: "no"}[c.AcceptedAsync.RetryAfter]; got != want {
				t.Errorf("the respond-async 202: the table says Retry-After %s, the contract %s", got, want)
			}
		}
	}
	if !accepted {
		t.Errorf("docs/clients.md's table has no row for the respond-async %d", c.AcceptedAsync.Status)
	}
	for _, p := range c.Problems {
		if !p.On(contract.ListenerProxy) {
			if !strings.Contains(section, "`"+p.Type+"`") {
				t.Errorf("admin problem %s is not named in docs/clients.md", p.Type)
			}
			continue
		}
		cells, ok := rows[p.Type]
		if !ok {
			t.Errorf("problem %s has no row in docs/clients.md's table", p.Type)
			continue
		}
		if got, want := strings.TrimSpace(cells[1]), "`"+strconv.Itoa(p.Status)+"`"; got != want {
			t.Errorf("problem %s: the table says status %s, the contract %s", p.Type, got, want)
		}
		if got, want := strings.TrimSpace(cells[2]), map[bool]string{true: "yes", false: "no"}[p.RetryAfter]; got != want {
			t.Errorf("problem %s: the table says Retry-After %s, the contract %s", p.Type, got, want)
		}
		if got := strings.Trim(strings.Fields(cells[3])[0], "*:"); got != p.Client {
			t.Errorf("problem %s: the table says %s, the contract %s", p.Type, got, p.Client)
		}
	}
}

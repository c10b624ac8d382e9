package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// graphqlServer is testdata/graphql/server.js: graphql-js served by
// graphql-http, counting the mutations and queries it executes.
type graphqlServer struct {
	addr    string
	node    string
	modules string
}

func startGraphQLServer(t *testing.T) *graphqlServer {
	t.Helper()
	s := &graphqlServer{node: testbin.Tool(t, "node", ""), modules: nodeModules(t, "graphql")}
	s.addr = testbin.FreeAddr(t)
	_, port, _ := net.SplitHostPort(s.addr)
	testbin.Start(t, testbin.Command{
		Path: s.node,
		Args: []string{graphqlTestdata(t, "server.js"), port},
		Env:  []string{"NODE_PATH=" + s.modules},
	})
	awaitListening(t, s.addr)
	return s
}

func graphqlTestdata(t *testing.T, name string) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "e2e/testdata/graphql", name)
}

// counts asks the server, not through the proxy, what it executed.
func (s *graphqlServer) counts(t *testing.T) (charges, queries int) {
	t.Helper()
	res, err := http.Get("http://" + s.addr + "/counts")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var c struct{ Charge, Query int }
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c.Charge, c.Query
}

func graphqlBody(query string, variables map[string]any) string {
	b, _ := json.Marshal(map[string]any{"query": query, "variables": variables})
	return string(b)
}

// graphqlCode is the extensions.code of a GraphQL answer's one error, ""
// when it has data.
func graphqlCode(t *testing.T, r reply) string {
	t.Helper()
	var body struct {
		Data   json.RawMessage
		Errors []struct{ Extensions struct{ Code string } }
	}
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("not a GraphQL answer: %s", r)
	}
	if body.Data != nil || len(body.Errors) != 1 {
		return ""
	}
	return body.Errors[0].Extensions.Code
}

// A GraphQL route in front of a real GraphQL server (graphql-js behind
// graphql-http, the GraphQL-over-HTTP reference server): a retried
// mutation executes once and is replayed; every query reaches the server,
// under one key or none; a mutation keyed by Shopify's @idempotent
// directive, with no key header, executes once; an ambiguous document and
// a mutation over GET are refused as GraphQL errors before the server sees
// them; and graphql-http's own client, retrying a mutation, gets the first
// execution's answer. On the memory and the Redis store.
func TestGraphQLMutationsExecuteOnceAndQueriesReachTheServer(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			srv := startGraphQLServer(t)
			cfg := proxyConfig{
				Upstream: "http://" + srv.addr,
				Routes:   []routeConfig{{Match: "/graphql", Keys: map[string]string{"graphql": "true"}}},
			}
			if kind == "redis" {
				cfg.RedisURL = redistest.Start(t).URL()
			} else {
				cfg.Memory = true
			}
			p := startProxy(t, "graphql-"+kind, cfg)
			c := newClient(t, 10*time.Second)
			post := func(key, body string, header map[string]string) reply {
				return mustSend(t, c, p.URL(), request{Path: "/graphql", Key: key, Body: body, Header: header})
			}

			charge := graphqlBody(`mutation Charge($amount: Int!) { charge(amount: $amount) { id amount } }`, map[string]any{"amount": 5})
			first := post("charge-1", charge, nil)
			again := post("charge-1", charge, nil)
			if first.Status != http.StatusOK || graphqlCode(t, first) != "" || !again.Replayed() || again.Body != first.Body {
				t.Fatalf("retried mutation: %s then %s, want the first answer replayed", first, again)
			}
			if n, _ := srv.counts(t); n != 1 {
				t.Fatalf("the server executed the retried mutation %d times, want once", n)
			}

			query := graphqlBody(`query { charges }`, nil)
			for range 2 {
				if r := post("charge-1", query, nil); r.Replayed() || r.Status != http.StatusOK {
					t.Fatalf("query under a used key: %s, want the server's answer", r)
				}
				post("", query, nil)
			}
			if _, q := srv.counts(t); q != 4 {
				t.Fatalf("the server executed %d queries, want all 4", q)
			}

			directive := graphqlBody(`mutation { charge(amount: 9) @idempotent(key: "shopify-1") { id } }`, nil)
			post("", directive, nil)
			if r := post("", directive, nil); !r.Replayed() {
				t.Fatalf("retried mutation keyed by @idempotent: %s, want a replay", r)
			}
			if n, _ := srv.counts(t); n != 2 {
				t.Fatalf("after the directive's mutation the server executed %d charges, want 2", n)
			}

			ambiguous := `{"query":"query A { charges } mutation B { charge(amount: 1) { id } }","operationName":"A"}`
			r := post("amb-1", ambiguous, map[string]string{"Accept": "application/graphql-response+json"})
			if r.Status != http.StatusBadRequest || graphqlCode(t, r) != "AMBIGUOUS_BODY" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/graphql-response+json") {
				t.Fatalf("a document of a query and a mutation: %s, want 400 AMBIGUOUS_BODY as application/graphql-response+json", r)
			}
			get := mustSend(t, c, p.URL(), request{Method: http.MethodGet, Path: "/graphql?query=" + url.QueryEscape(`mutation { charge(amount: 2) { id } }`)})
			if get.Status != http.StatusOK || graphqlCode(t, get) != "AMBIGUOUS_METHOD" {
				t.Fatalf("a mutation over GET: %s, want 200 AMBIGUOUS_METHOD for an application/json client", get)
			}
			if n, _ := srv.counts(t); n != 2 {
				t.Fatalf("the refused requests executed: %d charges, want 2", n)
			}

			// graphql-http's client, sending a mutation and its retry.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, srv.node, graphqlTestdata(t, "client.js"), p.URL()+"/graphql", "client-1")
			cmd.Env = append(cmd.Environ(), "NODE_PATH="+srv.modules)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("graphql-http client: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 || lines[0] != lines[1] || !strings.Contains(lines[0], `"charge":{"id":3`) {
				t.Fatalf("graphql-http client got %q, want the third charge twice", lines)
			}
			if n, _ := srv.counts(t); n != 3 {
				t.Fatalf("the client's mutation and its retry executed: %d charges, want 3", n)
			}
		})
	}
}

// TestGraphQLWalkThroughRuns runs the curl commands of "GraphQL" in
// docs/request-handling.md against the built proxy in front of the
// GraphQL server: the mutation keyed by its directive executes once and
// its second sending is replayed, and the document of a query and a
// mutation is refused with 400 AMBIGUOUS_BODY.
func TestGraphQLWalkThroughRuns(t *testing.T) {
	testbin.Tool(t, "curl", "Debian package curl")
	cmds := requestHandlingCommands(t, "GraphQL")
	if len(cmds) != 2 || len(cmds[0]) != 1 || len(cmds[1]) != 1 || cmds[0][0][0] != "curl" || cmds[1][0][0] != "curl" {
		t.Fatalf("the walk-through runs %q, want two curl commands: a mutation and an ambiguous document", cmds)
	}
	srv := startGraphQLServer(t)
	p := startProxy(t, "graphql-walkthrough", proxyConfig{
		Upstream: "http://" + srv.addr,
		Memory:   true,
		Routes:   []routeConfig{{Match: "/graphql", Keys: map[string]string{"graphql": "true"}}},
	})
	first := runCurl(t, pointAt(cmds[0][0][1:], p.URL(), ""))
	again := runCurl(t, pointAt(cmds[0][0][1:], p.URL(), ""))
	if first.StatusCode != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the mutation: %d, then %d replayed %q; want 200, then the replay", first.StatusCode, again.StatusCode, again.Header.Get("Idempotent-Replayed"))
	}
	if n, _ := srv.counts(t); n != 1 {
		t.Fatalf("the server executed the mutation %d times, want once", n)
	}
	amb := runCurl(t, pointAt(cmds[1][0][1:], p.URL(), ""))
	body, _ := io.ReadAll(amb.Body)
	if amb.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"code":"AMBIGUOUS_BODY"`) {
		t.Fatalf("the ambiguous document: %d %s, want 400 AMBIGUOUS_BODY", amb.StatusCode, body)
	}
}

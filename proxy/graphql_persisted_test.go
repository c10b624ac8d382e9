package proxy

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// apqServer is a GraphQL server with automatic persisted queries, as Apollo
// Server and gqlgen answer them: a request sent by its hash alone runs the
// document the hash names once the server has seen it, and is otherwise
// answered PersistedQueryNotFound, status 200, nothing run; a request with
// its document and hash runs it and remembers it.
type apqServer struct {
	mu         sync.Mutex
	known      map[string]string
	executions atomic.Int64
}

func (s *apqServer) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query      string `json:"query"`
		Extensions struct {
			PersistedQuery struct {
				SHA256Hash string `json:"sha256Hash"`
			} `json:"persistedQuery"`
		} `json:"extensions"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	w.Header().Set("Content-Type", "application/json")
	hash := req.Extensions.PersistedQuery.SHA256Hash
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Query == "" {
		if _, ok := s.known[hash]; !ok {
			w.Write([]byte(`{"errors":[{"message":"PersistedQueryNotFound","extensions":{"code":"PERSISTED_QUERY_NOT_FOUND"}}]}`))
			return
		}
	} else {
		if s.known == nil {
			s.known = map[string]string{}
		}
		s.known[hash] = req.Query
	}
	n := s.executions.Add(1)
	w.Write([]byte(`{"data":{"charge":{"id":` + itoa(n) + `}}}`))
}

// apqBodies are the two requests Apollo Client's persisted query link
// sends for one operation: its hash alone, then, when the server does not
// know it, the hash and the document.
func apqBodies(doc, variables string) (hashOnly, withDoc string) {
	sum := sha256.Sum256([]byte(doc))
	ext := `"extensions":{"persistedQuery":{"version":1,"sha256Hash":"` + hex.EncodeToString(sum[:]) + `"}}`
	q, _ := json.Marshal(doc)
	hashOnly = `{"operationName":"Charge","variables":` + variables + `,` + ext + `}`
	withDoc = `{"operationName":"Charge","variables":` + variables + `,"query":` + string(q) + `,` + ext + `}`
	return hashOnly, withDoc
}

// A mutation sent as an automatic persisted query runs once under its key:
// the server's PersistedQueryNotFound to the hash alone is not an answer
// (the key is released, as for a release status), the document sent after
// it under the same key is the same request, and a retry sent by its hash
// alone is replayed that answer.
func TestGraphQLPersistedMutationRunsOnceUnderItsKey(t *testing.T) {
	s := &apqServer{}
	e := newEnv(t, s.serve, withPolicy(onGraphQL))
	doc := `mutation Charge($amount: Int!) { charge(amount: $amount) { id } }`
	hashOnly, withDoc := apqBodies(doc, `{"amount":5}`)

	first := e.do(t, "POST", "/graphql", "k", hashOnly)
	if first.replayed() || !strings.Contains(first.body, "PersistedQueryNotFound") {
		t.Fatalf("the hash alone: %d %s; want the server's PersistedQueryNotFound", first.StatusCode, first.body)
	}
	second := e.do(t, "POST", "/graphql", "k", withDoc)
	if second.replayed() || second.body != `{"data":{"charge":{"id":1}}}` {
		t.Fatalf("the document after it, same key: %d %s, replayed %v; want it run", second.StatusCode, second.body, second.replayed())
	}
	retry := e.do(t, "POST", "/graphql", "k", hashOnly)
	if !retry.replayed() || retry.body != second.body {
		t.Fatalf("a retry by its hash alone: %d %s, replayed %v; want the answer replayed", retry.StatusCode, retry.body, retry.replayed())
	}
	// Its variables in another order are the same request; another value
	// is another.
	other, _ := apqBodies(doc, `{"amount":6}`)
	if r := e.do(t, "POST", "/graphql", "k", other); r.StatusCode != http.StatusOK || !strings.Contains(r.body, "PAYLOAD_MISMATCH") {
		t.Fatalf("the hash with other variables: %d %s; want payload-mismatch", r.StatusCode, r.body)
	}
	if n := s.executions.Load(); n != 1 {
		t.Fatalf("the mutation ran %d times, want 1", n)
	}
	if got := e.outcomes(defaultRoute, OutcomeReleased); got != 1 {
		t.Errorf("released = %v, want 1: the PersistedQueryNotFound", got)
	}
}

// A server that compresses its answers (a gzip middleware before it, for a
// client that accepts gzip) answers PersistedQueryNotFound compressed: it
// is still no answer, and releases the key, so that the document sent
// after it under the same key runs, and is not replayed the refusal.
func TestGraphQLCompressedPersistedQueryNotFoundReleasesTheKey(t *testing.T) {
	s := &apqServer{}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			s.serve(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		s.serve(gzipWriter{w, zw}, r)
	}, withPolicy(onGraphQL))
	doc := `mutation Charge($amount: Int!) { charge(amount: $amount) { id } }`
	hashOnly, withDoc := apqBodies(doc, `{"amount":5}`)

	if first := e.do(t, "POST", "/graphql", "k", hashOnly, "Accept-Encoding", "gzip"); first.replayed() {
		t.Fatalf("the hash alone: %d, replayed; want the server's PersistedQueryNotFound", first.StatusCode)
	}
	second := e.do(t, "POST", "/graphql", "k", withDoc, "Accept-Encoding", "gzip")
	if second.replayed() || s.executions.Load() != 1 {
		t.Fatalf("the document after it, same key: %d, replayed %v, executions %d; want it run",
			second.StatusCode, second.replayed(), s.executions.Load())
	}
	if got := e.outcomes(defaultRoute, OutcomeReleased); got != 1 {
		t.Errorf("released = %v, want 1: the PersistedQueryNotFound", got)
	}
}

// gzipWriter is a response writer whose body goes through a gzip writer.
type gzipWriter struct {
	http.ResponseWriter
	zw *gzip.Writer
}

func (g gzipWriter) Write(p []byte) (int, error) { return g.zw.Write(p) }

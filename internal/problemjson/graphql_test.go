package problemjson

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAcceptsGraphQLResponse(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"application/json", false},
		{"*/*", false},
		{"application/graphql-response+json", true},
		{"Application/GraphQL-Response+JSON; charset=utf-8", true},
		{"application/json;q=0.9, application/graphql-response+json", true},
		{"application/graphql-response+json;q=0", false},
		{"application/graphql-response+json;q=0.0, application/json", false},
		{"text/html, application/graphql-response+json;q=0.5", true},
	} {
		if got := AcceptsGraphQLResponse(tc.accept); got != tc.want {
			t.Errorf("AcceptsGraphQLResponse(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

func TestWriteGraphQLCarriesTheProblem(t *testing.T) {
	w := httptest.NewRecorder()
	b := Body{Type: "https://idempotency-proxy.dev/problems/in-flight", Title: "t", Status: 409, Detail: "d", StartedAt: "2026-12-01T09:00:00.101Z"}
	if got := WriteGraphQL(w, "application/graphql-response+json", b, 1); got != http.StatusConflict || w.Code != got {
		t.Fatalf("status %d (returned %d), want 409", w.Code, got)
	}
	if w.Header().Get("Retry-After") != "1" || w.Header().Get("Content-Type") != "application/graphql-response+json; charset=utf-8" {
		t.Errorf("headers %v", w.Header())
	}
	var got struct {
		Errors []struct {
			Message    string
			Extensions struct {
				Code, Type string
				StartedAt  string `json:"started_at"`
				Status     int
			}
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got.Errors) != 1 {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	e := got.Errors[0]
	if e.Message != "d" || e.Extensions.Code != "IN_FLIGHT" || e.Extensions.Type != b.Type || e.Extensions.Status != 409 || e.Extensions.StartedAt != b.StartedAt {
		t.Errorf("error %+v", e)
	}
}

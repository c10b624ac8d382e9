package problemjson

import (
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// GraphQL-over-HTTP's media types: the one whose HTTP status says what
// happened, and the older one answered 200 whatever happened.
const (
	GraphQLResponseType = "application/graphql-response+json"
	GraphQLJSONType     = "application/json"
)

// GraphQLCode is the extensions.code of a problem type in a GraphQL
// answer: the type's last path segment, upper-cased, with underscores
// ("…/problems/in-flight" is IN_FLIGHT). clients/contract.json lists the
// code of every type (its "graphql" section), and a test holds the two
// together.
func GraphQLCode(problemType string) string {
	name := problemType[strings.LastIndexByte(problemType, '/')+1:]
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// graphqlBody is a GraphQL response holding one error and no data: a
// request error, the request not executed.
type graphqlBody struct {
	Errors [1]graphqlError `json:"errors"`
}

type graphqlError struct {
	Message    string            `json:"message"`
	Extensions graphqlExtensions `json:"extensions"`
}

type graphqlExtensions struct {
	Code      string `json:"code"`
	Type      string `json:"type"`
	Status    int    `json:"status"`
	StartedAt string `json:"started_at,omitempty"`
}

// WriteGraphQL answers b as a GraphQL response, for a client of a GraphQL
// route: {"errors":[{"message": detail, "extensions": {"code", "type",
// "status"}}]}. A client that accepts application/graphql-response+json
// gets it with b's status, as GraphQL over HTTP says for a request error;
// any other gets application/json with 200, as that media type is
// answered. Retry-After and Cache-Control are those of Write. It returns
// the status sent.
func WriteGraphQL(w http.ResponseWriter, accept string, b Body, retryAfter int) int {
	var g graphqlBody
	g.Errors[0] = graphqlError{Message: b.Detail, Extensions: graphqlExtensions{
		Code: GraphQLCode(b.Type), Type: b.Type, Status: b.Status, StartedAt: b.StartedAt,
	}}
	if g.Errors[0].Message == "" {
		g.Errors[0].Message = b.Title
	}
	body, _ := json.Marshal(g) // strings and an int: cannot fail
	body = append(body, '\n')
	status, ctype := http.StatusOK, GraphQLJSONType+"; charset=utf-8"
	if AcceptsGraphQLResponse(accept) {
		status, ctype = b.Status, GraphQLResponseType+"; charset=utf-8"
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	w.Write(body)
	return status
}

// AcceptsGraphQLResponse reports whether an Accept header lists
// application/graphql-response+json (not with q=0).
func AcceptsGraphQLResponse(accept string) bool {
	for accept != "" {
		var r string
		r, accept, _ = strings.Cut(accept, ",")
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(r))
		if err != nil || mt != GraphQLResponseType {
			continue
		}
		if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q == 0 {
			continue
		}
		return true
	}
	return false
}

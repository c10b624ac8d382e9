package graphqlop

import "encoding/json"

// PersistedQueryNotFound reports whether body, a GraphQL answer, is a
// server's refusal of a persisted query it does not know, which runs
// nothing: no data, and a first error whose extensions.code is
// PERSISTED_QUERY_NOT_FOUND or whose message is PersistedQueryNotFound, as
// Apollo Server, the Apollo Router, gqlgen and GraphQL Yoga answer it.
// The client then sends the hash again with its document.
func PersistedQueryNotFound(body []byte) bool {
	var a struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &a) != nil || len(a.Errors) == 0 || len(a.Data) > 0 && string(a.Data) != "null" {
		return false
	}
	e := a.Errors[0]
	return e.Extensions.Code == "PERSISTED_QUERY_NOT_FOUND" || e.Message == "PersistedQueryNotFound"
}

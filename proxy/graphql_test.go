package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

func onGraphQL(p *Policy) { p.GraphQL = true }

// graphqlError is the one error of a GraphQL answer the proxy gives.
func graphqlError(t *testing.T, r *response) (code, typ string) {
	t.Helper()
	var body struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string
			Extensions struct{ Code, Type string }
		}
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || len(body.Errors) != 1 || body.Data != nil {
		t.Fatalf("not a GraphQL error answer (%v): %d %s", err, r.StatusCode, r.body)
	}
	if body.Errors[0].Message == "" {
		t.Errorf("the error has no message: %s", r.body)
	}
	return body.Errors[0].Extensions.Code, body.Errors[0].Extensions.Type
}

func gql(query string) string {
	b, _ := json.Marshal(map[string]string{"query": query})
	return string(b)
}

func TestRetriedGraphQLMutationExecutesOnce(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	body := gql(`mutation { charge(amount: 7) { id } }`)
	first := e.do(t, "POST", "/graphql", "m-1", body)
	again := e.do(t, "POST", "/graphql", "m-1", body)
	if got := e.up.calls.Load(); got != 1 || !again.replayed() || again.body != first.body {
		t.Fatalf("executions = %d, replayed = %v; want one execution, replayed", got, again.replayed())
	}
}

func TestGraphQLQueriesAreNeverStored(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	for _, body := range []string{
		gql(`{ charges }`),
		gql(`query Q { charges }`),
		gql(`subscription { paid }`),
		`[{"query":"{ a }"},{"query":"{ b }"}]`,
	} {
		before := e.up.calls.Load()
		a := e.do(t, "POST", "/graphql", "same-key", body)
		b := e.do(t, "POST", "/graphql", "same-key", body)
		if got := e.up.calls.Load() - before; got != 2 || a.replayed() || b.replayed() {
			t.Errorf("%s: executions = %d, replayed = %v/%v; want each to reach the upstream", body, got, a.replayed(), b.replayed())
		}
	}
	if got := e.outcomes(defaultRoute, OutcomePassthrough); got != 8 {
		t.Errorf("passthrough = %v, want 8", got)
	}
}

func TestGraphQLDirectiveKeyProtectsAMutation(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	lit := gql(`mutation { refundCreate(id: 1) @idempotent(key: "r-1") { id } }`)
	viaVar := `{"query":"mutation R($k: String!) { refundCreate(id: 1) @idempotent(key: $k) { id } }","variables":{"k":"r-2"}}`
	for _, body := range []string{lit, lit, viaVar, viaVar} {
		e.do(t, "POST", "/graphql", "", body) // no header: the directive is the key
	}
	if got := e.up.calls.Load(); got != 2 {
		t.Fatalf("executions = %d, want one per directive key", got)
	}
	// The same directive key with other variables is another operation.
	r := e.do(t, "POST", "/graphql", "", `{"query":"mutation R($k: String!) { refundCreate(id: 1) @idempotent(key: $k) { id } }","variables":{"k":"r-2","x":1}}`)
	if code, _ := graphqlError(t, r); code != "PAYLOAD_MISMATCH" {
		t.Errorf("code = %s, want PAYLOAD_MISMATCH", code)
	}
}

// express-graphql and graphql-go/handler run a mutation whose variables
// come as a JSON string (as GraphiQL once sent them) with the object the
// string holds, and one whose variables or operationName is of another
// type as if it had none: its directive key protects it all the same.
func TestGraphQLDirectiveKeyHoldsWhateverTypeTheVariablesAndNameHave(t *testing.T) {
	const q = `mutation R($k: String!, $n: Int) { refundCreate(id: $n) @idempotent(key: $k) { id } }`
	const lit = `mutation { refundCreate(id: 1) @idempotent(key: \"lit-1\") { id } }`
	for name, body := range map[string]string{
		"variables as a string":         `{"query":"` + q + `","variables":"{\"k\":\"s-1\",\"n\":1}"}`,
		"variables as a number":         `{"query":"` + lit + `","variables":5}`,
		"variables as an array":         `{"query":"` + lit + `","variables":[]}`,
		"variables as a string of none": `{"query":"` + lit + `","variables":"not json"}`,
		"an operationName not a string": `{"query":"` + lit + `","operationName":7}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil, withPolicy(onGraphQL))
			first := e.do(t, "POST", "/graphql", "", body) // no header: the directive is the key
			again := e.do(t, "POST", "/graphql", "", body)
			if got := e.up.calls.Load(); got != 1 || !again.replayed() || again.body != first.body {
				t.Fatalf("executions = %d, replayed = %v; want one execution, replayed", got, again.replayed())
			}
		})
	}
	t.Run("a form whose variables are not JSON", func(t *testing.T) {
		e := newEnv(t, nil, withPolicy(onGraphQL))
		form := rawForm("/graphql", formType, url.Values{"query": {strings.ReplaceAll(lit, `\"`, `"`)}, "variables": {`{not json`}}.Encode())
		first, again := e.raw(t, form), e.raw(t, form)
		if got := e.up.calls.Load(); got != 1 || !again.replayed() || again.body != first.body {
			t.Fatalf("executions = %d, replayed = %v; want one execution, replayed", got, again.replayed())
		}
	})
	t.Run("a string is read as the object it holds", func(t *testing.T) {
		e := newEnv(t, nil, withPolicy(onGraphQL))
		e.do(t, "POST", "/graphql", "", `{"query":"`+q+`","variables":"{\"k\":\"s-2\",\"n\":1}"}`)
		same := e.do(t, "POST", "/graphql", "", `{"query":"`+q+`","variables":{"n":1,"k":"s-2"}}`)
		if !same.replayed() || e.up.calls.Load() != 1 {
			t.Fatalf("the same variables as an object: replayed = %v, executions = %d", same.replayed(), e.up.calls.Load())
		}
		other := e.do(t, "POST", "/graphql", "", `{"query":"`+q+`","variables":"{\"k\":\"s-2\",\"n\":2}"}`)
		if code, _ := graphqlError(t, other); code != "PAYLOAD_MISMATCH" {
			t.Errorf("other variables in a string: code %s, want PAYLOAD_MISMATCH", code)
		}
	})
}

func TestGraphQLMutationVariablesAreFingerprintedCanonically(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	q := `mutation M($a: Int, $b: Int) { m(a: $a, b: $b) }`
	e.do(t, "POST", "/graphql", "v-1", `{"query":"`+q+`","variables":{"a":1,"b":2}}`)
	r := e.do(t, "POST", "/graphql", "v-1", `{"variables": {"b": 2, "a": 1}, "query":"`+q+`"}`)
	if !r.replayed() || e.up.calls.Load() != 1 {
		t.Fatalf("the same variables in another order: replayed = %v, executions = %d", r.replayed(), e.up.calls.Load())
	}
}

func TestAmbiguousGraphQLRequestsAreRefused(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	for name, body := range map[string]string{
		"several operations, one a mutation": `{"query":"query A { a } mutation B { b }","operationName":"A"}`,
		"a batch holding a mutation":         `[{"query":"{ a }"},{"query":"mutation { b }"}]`,
		"an operationName naming none":       `{"query":"mutation M { a }","operationName":"N"}`,
		"two directive keys":                 gql(`mutation { a @idempotent(key: "x") b @idempotent(key: "y") }`),
	} {
		r := e.do(t, "POST", "/graphql", "k", body)
		if code, typ := graphqlError(t, r); code != "AMBIGUOUS_BODY" || typ != problemjson.Base+"ambiguous-body" {
			t.Errorf("%s: code %s type %s, want AMBIGUOUS_BODY", name, code, typ)
		}
		if r.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want 200 for an application/json client", name, r.StatusCode)
		}
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want none", got)
	}
}

func TestGraphQLRefusalStatusFollowsAccept(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.GraphQL, p.RequireKey = true, true }))
	body := gql(`mutation { charge { id } }`)
	for _, tc := range []struct {
		accept, ctype string
		status        int
	}{
		{"", problemjson.GraphQLJSONType, http.StatusOK},
		{"application/json", problemjson.GraphQLJSONType, http.StatusOK},
		{"application/graphql-response+json, application/json;q=0.9", problemjson.GraphQLResponseType, http.StatusBadRequest},
		{"application/graphql-response+json;q=0, application/json", problemjson.GraphQLJSONType, http.StatusOK},
	} {
		r := e.do(t, "POST", "/graphql", "", body, "Accept", tc.accept)
		if code, _ := graphqlError(t, r); code != "MISSING_KEY" {
			t.Errorf("Accept %q: code %s, want MISSING_KEY", tc.accept, code)
		}
		if got := r.Header.Get("Content-Type"); !strings.HasPrefix(got, tc.ctype) || r.StatusCode != tc.status {
			t.Errorf("Accept %q: %d %s, want %d %s", tc.accept, r.StatusCode, got, tc.status, tc.ctype)
		}
	}
}

func TestGraphQLMutationOverGETIsRefused(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	r := e.do(t, "GET", "/graphql?query="+url.QueryEscape(`mutation { charge { id } }`), "", "")
	if code, _ := graphqlError(t, r); code != "AMBIGUOUS_METHOD" {
		t.Errorf("code %s, want AMBIGUOUS_METHOD", code)
	}
	e.do(t, "GET", "/graphql?query="+url.QueryEscape(`{ charges }`), "", "")
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want the query only", got)
	}
}

// graphql-go/handler and express-graphql read the query string's query
// before the body, whatever the method: a POST whose body is a query and
// whose query string is a mutation runs the mutation there, while a
// server that reads the body alone (graphql-http) runs the query. Passed
// through as a query, the mutation would run on every retry.
func TestGraphQLMutationInAPOSTQueryStringNeverPassesThrough(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	path := "/graphql?query=" + url.QueryEscape(`mutation { charge(amount: 5) { id } }`)
	for range 2 {
		r := e.do(t, "POST", path, "q-1", gql(`{ charges }`))
		if code, _ := graphqlError(t, r); code != "AMBIGUOUS_BODY" {
			t.Errorf("code %s, want AMBIGUOUS_BODY", code)
		}
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want none: the mutation in the query string ran unprotected", got)
	}
	// A query in the query string is no mutation: the body decides.
	e.do(t, "POST", "/graphql?query="+url.QueryEscape(`{ charges }`), "q-2", gql(`{ charges }`))
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want the query passed through", got)
	}
}

// graphql-go/handler runs the query string's query whatever the method,
// one the route does not protect included: a mutation there is refused
// as over GET, never passed through.
func TestGraphQLMutationInTheQueryStringOfAnUnprotectedMethodIsRefused(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.GraphQL, p.Methods = true, []string{"POST"} }))
	path := "/graphql?query=" + url.QueryEscape(`mutation { charge(amount: 5) { id } }`)
	for _, method := range []string{"PUT", "OPTIONS"} {
		r := e.do(t, method, path, "", "")
		if code, _ := graphqlError(t, r); code != "AMBIGUOUS_BODY" {
			t.Errorf("%s: code %s, want AMBIGUOUS_BODY", method, code)
		}
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want none: the mutation in the query string ran unprotected", got)
	}
	e.do(t, "PUT", "/graphql?query="+url.QueryEscape(`{ charges }`), "", "")
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want the query passed through", got)
	}
}

// url.ParseQuery drops a pair holding a ";" or a malformed escape; Node's
// URLSearchParams (express-graphql) keeps it whole, and a ";" or a "%" in
// a comment or a string leaves the mutation a mutation to graphql-js.
func TestGraphQLMutationInAQueryStringIsFoundWhereGoDropsThePair(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	mutation := "query=" + url.QueryEscape(`mutation { charge(amount: 5) { id } }`) + "%23"
	for _, raw := range []string{mutation + ";", mutation + "%zz", "x=1;" + mutation} {
		r := e.do(t, "POST", "/graphql?"+raw, "s-1", gql(`{ charges }`))
		if code, _ := graphqlError(t, r); code != "AMBIGUOUS_BODY" {
			t.Errorf("?%s: code %s, want AMBIGUOUS_BODY", raw, code)
		}
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want none: the mutation in the query string ran unprotected", got)
	}
}

// A mutation nested past what the proxy's parser reads (gqlparser stops
// at 1000 levels) still parses, validates and runs in graphql-js 16,
// which sets no such bound: in a query string it is a mutation all the
// same.
func TestGraphQLMutationInAQueryStringIsRefusedWhereTheParserGivesUp(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	deep := "mutation { " + strings.Repeat("... { ", 1000) + "charge(amount: 5) { id }" + strings.Repeat(" }", 1000) + " }"
	get := e.do(t, "GET", "/graphql?query="+url.QueryEscape(deep), "", "")
	if code, _ := graphqlError(t, get); code != "AMBIGUOUS_METHOD" {
		t.Errorf("GET: code %s, want AMBIGUOUS_METHOD", code)
	}
	post := e.do(t, "POST", "/graphql?query="+url.QueryEscape(deep), "d-1", gql(`{ charges }`))
	if code, _ := graphqlError(t, post); code != "AMBIGUOUS_BODY" {
		t.Errorf("POST: code %s, want AMBIGUOUS_BODY", code)
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want none: the nested mutation ran unprotected", got)
	}
}

func TestNonGraphQLBodyOnAGraphQLRouteIsProtectedAsAnyRequest(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	for range 2 {
		e.do(t, "POST", "/graphql", "form-1", "query=mutation+%7B+a+%7D", "Content-Type", "application/x-www-form-urlencoded")
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
}

func TestGraphQLDirectiveKeyFollowsTheKeyRules(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	r := e.do(t, "POST", "/graphql", "", gql(`mutation { a @idempotent(key: "") }`))
	if code, _ := graphqlError(t, r); code != "INVALID_KEY" {
		t.Errorf("code %s, want INVALID_KEY", code)
	}
}

// Every problem the proxy answers has its GraphQL code in
// clients/contract.json, the one the GraphQL answer carries, and the
// contract gives no code to a type the proxy never answers.
func TestEveryProblemTypeHasAGraphQLCode(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	answered := map[string]bool{}
	for _, p := range problemTypes {
		name := strings.TrimPrefix(p.Type, problemjson.Base)
		answered[name] = true
		code, ok := c.GraphQL.Codes[name]
		switch {
		case !ok:
			t.Errorf("problem %s has no GraphQL code in %s", name, contract.Path)
		case code != problemjson.GraphQLCode(p.Type):
			t.Errorf("problem %s: %s says code %s, a GraphQL answer carries %s", name, contract.Path, code, problemjson.GraphQLCode(p.Type))
		}
	}
	for name := range c.GraphQL.Codes {
		if !answered[name] {
			t.Errorf("%s gives problem %s a GraphQL code, but the proxy never answers it", contract.Path, name)
		}
	}
}

// An upstream that fails after a mutation was sent: the client gets the
// 502 upstream-failed as a GraphQL error, and under on_upstream_error:
// keep its retry is answered the same recorded error, never executed.
func TestGraphQLUpstreamFailureIsAGraphQLErrorAndKept(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler) // the connection cut before an answer
	}, withPolicy(func(p *Policy) { p.GraphQL, p.OnUpstreamError = true, UpstreamErrorKeep }))
	body := gql(`mutation { charge { id } }`)
	accept := []string{"Accept", "application/graphql-response+json"}
	first := e.do(t, "POST", "/graphql", "cut-1", body, accept...)
	if code, _ := graphqlError(t, first); code != "UPSTREAM_FAILED" || first.StatusCode != http.StatusBadGateway {
		t.Fatalf("first: %d %s, want 502 UPSTREAM_FAILED", first.StatusCode, code)
	}
	var again *response
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		again = e.do(t, "POST", "/graphql", "cut-1", body, accept...)
		if again.StatusCode == http.StatusConflict {
			return fmt.Errorf("still in flight: %s", again.body)
		}
		return nil
	})
	if code, _ := graphqlError(t, again); code != "UPSTREAM_FAILED" || !again.replayed() {
		t.Fatalf("retry: %d %s replayed %v, want the recorded UPSTREAM_FAILED", again.StatusCode, code, again.replayed())
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
}

func TestGraphQLMutationOverAProtectedGETIsRefused(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.GraphQL, p.Methods = true, []string{"GET", "POST"} }))
	r := e.do(t, "GET", "/graphql?query="+url.QueryEscape(`mutation { charge { id } }`), "k-get", "")
	if code, _ := graphqlError(t, r); code != "AMBIGUOUS_METHOD" {
		t.Errorf("code %s, want AMBIGUOUS_METHOD", code)
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want none", got)
	}
}

func TestGraphQLQueryNeedsNoKeyUnderRequireKey(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.GraphQL, p.RequireKey = true, true }))
	if r := e.do(t, "POST", "/graphql", "", gql(`{ charges }`)); r.StatusCode != http.StatusCreated {
		t.Fatalf("a query without a key: %d %s, want the upstream's answer", r.StatusCode, r.body)
	}
}

// A shadow route forwards what a GraphQL route would refuse, body and
// all, and counts it.
func TestShadowGraphQLRouteForwardsWhatItWouldRefuse(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.GraphQL, p.Mode = true, ModeShadow }))
	body := `[{"query":"{ a }"},{"query":"mutation { b }"}]`
	r := e.do(t, "POST", "/graphql", "k", body)
	if r.StatusCode != http.StatusCreated || !strings.Contains(r.body, `mutation { b }`) {
		t.Fatalf("%d %s, want the upstream's answer to the whole batch", r.StatusCode, r.body)
	}
	if n := testutil.ToFloat64(e.handler.metrics.shadow.WithLabelValues(defaultRoute, string(WouldAmbiguous))); n != 1 {
		t.Errorf("would ambiguous = %v, want 1", n)
	}
}

// A GraphQL request sent as a form (application/x-www-form-urlencoded,
// which express-graphql and graphql-go/handler read as they read JSON) is
// read as one: a mutation's @idempotent key protects it, its variables
// are fingerprinted as JSON's are, and a query passes through.
func TestGraphQLFormRequestIsReadAsAJSONOneIs(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	form := func(vals url.Values) string { return rawForm("/graphql", formType, vals.Encode()) }
	mutation := url.Values{"query": {`mutation R($k: String!, $a: Int) { refundCreate(id: $a) @idempotent(key: $k) { id } }`}, "variables": {`{"k":"r-1","a":1}`}}
	for range 2 {
		if r := e.raw(t, form(mutation)); r.StatusCode != http.StatusCreated {
			t.Fatalf("a form mutation: %d %s", r.StatusCode, r.body)
		}
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("a form mutation keyed by its directive: executions = %d, want 1", got)
	}
	// Its variables in another order are the same request; another
	// value is another operation.
	same := url.Values{"query": mutation["query"], "variables": {`{"a":1, "k":"r-1"}`}}
	if r := e.raw(t, form(same)); !r.replayed() {
		t.Errorf("the same variables in another order: %d, not replayed", r.StatusCode)
	}
	other := url.Values{"query": mutation["query"], "variables": {`{"k":"r-1","a":2}`}}
	if code, _ := graphqlError(t, e.raw(t, form(other))); code != "PAYLOAD_MISMATCH" {
		t.Errorf("another value under the key: %s, want PAYLOAD_MISMATCH", code)
	}
	// Two documents, one of them a mutation, are read two ways.
	two := url.Values{"query": {`{ charges }`, `mutation { charge(amount: 1) @idempotent(key: "c-1") { id } }`}}
	if code, _ := graphqlError(t, e.raw(t, form(two))); code != "AMBIGUOUS_BODY" {
		t.Errorf("two query fields, one a mutation: %s, want AMBIGUOUS_BODY", code)
	}
	// A query passes through whatever key it carries.
	before := e.up.calls.Load()
	for range 2 {
		if r := e.raw(t, rawForm("/graphql", formType, url.Values{"query": {`{ charges }`}}.Encode(), "Idempotency-Key: q-1")); r.replayed() {
			t.Errorf("a form query was replayed")
		}
	}
	if got := e.up.calls.Load() - before; got != 2 {
		t.Errorf("a form query sent twice: executions = %d, want 2", got)
	}
}

// uploadBody is a GraphQL multipart request (the file upload form of
// Apollo and graphql-upload): operations, map, then one file.
func uploadBody(boundary, operations, file string) string {
	part := func(name, extra, value string) string {
		return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"" + extra + "\r\n\r\n" + value + "\r\n"
	}
	return part("operations", "", operations) + part("map", "", `{"0":["variables.file"]}`) +
		part("0", "; filename=\"a.txt\"\r\nContent-Type: text/plain", file) + "--" + boundary + "--\r\n"
}

// A GraphQL upload (multipart/form-data with an operations field) is read
// as the JSON request in its operations field: a mutation's @idempotent
// key protects it, and its files are part of its fingerprint. (Its
// boundary is too, through Content-Type: an attempt under a new one is
// a 422, never a second execution.)
func TestGraphQLUploadIsReadByItsOperations(t *testing.T) {
	e := newEnv(t, nil, withPolicy(onGraphQL))
	ops := `{"query":"mutation U($file: Upload!) { upload(file: $file) @idempotent(key: \"u-1\") { id } }","variables":{"file":null}}`
	send := func(boundary, file string) *response {
		return e.raw(t, rawForm("/graphql", "multipart/form-data; boundary="+boundary, uploadBody(boundary, ops, file)))
	}
	if r := send("b1", "hello"); r.StatusCode != http.StatusCreated {
		t.Fatalf("an upload: %d %s", r.StatusCode, r.body)
	}
	if r := send("b1", "hello"); !r.replayed() {
		t.Errorf("the upload again: %d, not replayed: %s", r.StatusCode, r.body)
	}
	if code, _ := graphqlError(t, send("b2", "hello")); code != "PAYLOAD_MISMATCH" {
		t.Errorf("the upload under another boundary: %s, want PAYLOAD_MISMATCH", code)
	}
	if code, _ := graphqlError(t, send("b1", "other")); code != "PAYLOAD_MISMATCH" {
		t.Errorf("another file under the key: %s, want PAYLOAD_MISMATCH", code)
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("an upload keyed by its directive: executions = %d, want 1", got)
	}
}

// rawForm renders a POST with the given content type ("" for none) and
// body; extra header lines after.
func rawForm(target, contentType, body string, extra ...string) string {
	var b strings.Builder
	b.WriteString("POST " + target + " HTTP/1.1\r\nHost: h.example\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n")
	if contentType != "" {
		b.WriteString("Content-Type: " + contentType + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

const formType = "application/x-www-form-urlencoded"

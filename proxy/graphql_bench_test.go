package proxy

import (
	"net/http"
	"strconv"
	"testing"
)

// Handler benchmarks of a graphql: true route: a mutation keyed by a
// header (miss and replay) and a query passed through, beside
// BenchmarkHandlerMiss, BenchmarkHandlerHit and BenchmarkHandlerNoKey.
//
//	go test -run '^$' -bench 'HandlerGraphQL' -benchmem ./proxy

var (
	benchGraphQLMutation = []byte(`{"query":"mutation Charge($amount: Int!, $currency: String!) { charge(amount: $amount, currency: $currency) { id amount status } }","operationName":"Charge","variables":{"amount":2000,"currency":"eur"}}`)
	benchGraphQLQuery    = []byte(`{"query":"query Charges($first: Int!) { charges(first: $first) { id amount status } }","operationName":"Charges","variables":{"first":10}}`)
)

func graphqlBenchRig(b *testing.B) *benchRig {
	pol := DefaultPolicy()
	pol.GraphQL = true
	return newPolicyBenchRig(b, pol)
}

// serveGraphQL is serveBody, the rig's body put back first: a query
// passed through leaves the body it read on the request, as a request
// without a key does.
func (rig *benchRig) serveGraphQL(body []byte, key string) int {
	rig.r.Body = rig.body
	return rig.serveBody(body, key)
}

func BenchmarkHandlerGraphQLMutationMiss(b *testing.B) {
	rig := graphqlBenchRig(b)
	loopMisses(b, func(key string) int { return rig.serveGraphQL(benchGraphQLMutation, key) })
}

func BenchmarkHandlerGraphQLMutationHit(b *testing.B) {
	rig := graphqlBenchRig(b)
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	rig.serveGraphQL(benchGraphQLMutation, key)
	b.ReportAllocs()
	for b.Loop() {
		if got := rig.serveGraphQL(benchGraphQLMutation, key); got != http.StatusOK {
			b.Fatalf("status %d", got)
		}
	}
	if rig.w.header.Get("Idempotent-Replayed") != "true" {
		b.Fatalf("not replayed: %v", rig.w.header)
	}
}

func BenchmarkHandlerGraphQLQuery(b *testing.B) {
	rig := graphqlBenchRig(b)
	b.ReportAllocs()
	for b.Loop() {
		if got := rig.serveGraphQL(benchGraphQLQuery, "k"); got != http.StatusOK {
			b.Fatalf("status %d", got)
		}
	}
	if rig.w.header.Get("Content-Length") != strconv.Itoa(len(benchResponseBody)) {
		b.Fatalf("not the upstream's answer: %v", rig.w.header)
	}
}

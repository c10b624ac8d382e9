package graphqlop

import "testing"

// A mutation as a client library sends it: a named operation, its key in
// a variable, a few variables.
var benchMutation = []byte(`{"query":"mutation RefundCreate($input: RefundInput!, $key: String!) { refundCreate(input: $input) @idempotent(key: $key) { refund { id totalRefundedSet { shopMoney { amount currencyCode } } } userErrors { field message } } }","operationName":"RefundCreate","variables":{"key":"4f5b6ebf-143c-4da5-8d0f-fb8553bfd85d","input":{"orderId":"gid://shopify/Order/1","note":"damaged","refundLineItems":[{"lineItemId":"gid://shopify/LineItem/2","quantity":1}]}}}`)

var benchQuery = []byte(`{"query":"query Orders($first: Int!) { orders(first: $first) { edges { node { id name totalPriceSet { shopMoney { amount } } } } } }","operationName":"Orders","variables":{"first":10}}`)

func BenchmarkReadBodyMutation(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchMutation)))
	var buf []byte
	for b.Loop() {
		r, err := ReadBody("application/json", benchMutation)
		if err != nil || r.Key == "" {
			b.Fatal(r, err)
		}
		buf, _ = r.AppendCanonical(buf[:0])
	}
}

func BenchmarkReadBodyQuery(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchQuery)))
	for b.Loop() {
		if r, err := ReadBody("application/json", benchQuery); err != nil || r.Kind != Query {
			b.Fatal(r, err)
		}
	}
}

// The browser tests, in a module of their own so that chromedp stays out of
// the product's go.mod; go.work at the root lists it for local work.
module github.com/idempotency-proxy/idempotency-proxy/e2e/browser

go 1.26.0

require github.com/chromedp/chromedp v0.23.0

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)

require github.com/idempotency-proxy/idempotency-proxy v0.0.0

replace github.com/idempotency-proxy/idempotency-proxy => ../..

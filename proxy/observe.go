package proxy

// Observation is what the handler knows about a request once it has been
// answered, for Options.Observe. It is passed by value and costs nothing
// when no observer is set.
type Observation struct {
	// Route is the matched route's pattern; "" when the request matched no
	// route and the defaults applied.
	Route string
	// Outcome is what the proxy did with the request.
	Outcome Outcome
	// KeyHash is the full hash of the scoped idempotency key, as the store
	// and every log line name it; "" without a key.
	KeyHash string
}

package proxy

// Observation is what the handler knows about a request once it has been
// answered, for Options.Observe. It is passed by value and costs nothing
// when no observer is set.
type Observation struct {
	// Route is the matched route's pattern, or DefaultRoute.
	Route string
	// Outcome is what the proxy did with the request.
	Outcome Outcome
	// KeyHash is the full hash of the scoped idempotency key, as the store
	// knows it (logs show its first 12 characters); "" without a key.
	KeyHash string
}

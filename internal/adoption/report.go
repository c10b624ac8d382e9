// Package adoption holds the adoption report's answer (GET /admin/report,
// `idempotency-proxy report`): what each route did, or in shadow mode
// would have done, over a recent window. The proxy counts it; the admin
// API and the command line only carry and print it, so they need this
// value and not the proxy (docs/operating.md, "The adoption report").
package adoption

import "time"

// Bucket is the span one bucket of counts covers: counts are kept per
// minute, so a report's window is whole minutes, and a minute the smallest.
const Bucket = time.Minute

// Route is one route's line of the report.
type Route struct {
	Route string `json:"route"`
	Mode  string `json:"mode"`
	// Requests is every request the route answered; Keyed those with an
	// idempotency key; KeyedShare is Keyed over Keyed plus MissingKeys,
	// the requests of the methods the route protects.
	Requests   uint64  `json:"requests"`
	Keyed      uint64  `json:"keyed"`
	KeyedShare float64 `json:"keyed_share"`
	// Duplicates is Replayed plus WouldReplay: under enforce each saved
	// an upstream execution, under shadow each would have.
	Duplicates        uint64 `json:"duplicates"`
	ExecutionsSaved   uint64 `json:"upstream_executions_saved"`
	ExecutionsWouldBe uint64 `json:"upstream_executions_would_save"`
	Mismatches        uint64 `json:"mismatches"`
	Conflicts         uint64 `json:"conflicts"`
	MissingKeys       uint64 `json:"missing_keys"`
	Churn             uint64 `json:"key_churn"`
	// TopChurnScopes are the scopes with the most churn since the process
	// started, by their scope_hash as the key API shows it: never the values.
	TopChurnScopes []ChurnScope `json:"top_churn_scopes"`
}

// ChurnScope is one scope's churn.
type ChurnScope struct {
	ScopeHash string `json:"scope_hash"`
	Churn     uint64 `json:"key_churn"`
}

// Report is GET /admin/report's answer.
type Report struct {
	// Window is what was asked; Covered what the counts span, less when
	// the process started later or the window is longer than the counts are kept (24 hours).
	Window  string `json:"window"`
	Covered string `json:"covered"`
	// Since is when the covered span begins; Note says why Covered is
	// short of Window, "" when it is not.
	Since  time.Time `json:"since"`
	Note   string    `json:"note,omitempty"`
	Scope  string    `json:"scope"`
	Routes []Route   `json:"routes"`
}

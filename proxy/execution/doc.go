// Package execution holds the mechanisms of a request that executes its
// key, which know nothing of routes, key sources or HTTP answers: the
// lease and the rule of its renewal (RenewEvery, MinLockTTL), the
// upstream call's deadline and its client's wait (Call: the wait passes,
// then max_execution, the lease's renewals started by whichever timer is
// due first), the settling of the key once the call returned (Settling:
// the record stored or the key released, tried again until the lease
// ends, the key held while the store is full), the keys this process
// executes (Owners, for waiters and Abort), the goroutines that run
// upstream calls (Callers), the bound on calls detached from their
// clients (DetachBudget), and the clock they all read, which tests drive.
//
// The proxy's handler drives them (proxy/execute.go, detach.go): it takes
// the lease with Begin, starts the call, answers the client from what its
// Call's wait saw, decides what the store keeps of the call, and hands
// that to Settling. Nothing here imports the proxy.
package execution

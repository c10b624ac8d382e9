package proxy

import (
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Store is what the handler needs from an idempotency store, the key's
// lifecycle; every store.Store implements it (see store.BeginResult for the
// states). Its health (Ping) is the admin listener's concern, not the
// handler's. Complete must keep nothing of its record once it returns, as
// every store.Store does: the handler reuses the record's header.
type Store = store.Lifecycle

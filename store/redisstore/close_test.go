package redisstore

import (
	"testing"
	"time"
)

// A Sentinel store closed twice (a deferred Close after an explicit one)
// returns, as any other store does, rather than panicking in the goroutine
// that closes it and taking the process down.
func TestSentinelStoreClosesTwice(t *testing.T) {
	s, err := New(Options{Addrs: []string{"127.0.0.1:1"}, MasterName: "nowhere", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_ = s.Close()
}

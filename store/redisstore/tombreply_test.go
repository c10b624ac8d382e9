package redisstore

import (
	"errors"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestAnEmptyTombstoneReplyIsCorruptNotAPanic: what the begin script
// returns when tombstones are on is read with care: an empty value, or an
// empty earlier record, is a corrupt reply, not an index out of range.
func TestAnEmptyTombstoneReplyIsCorruptNotAPanic(t *testing.T) {
	for _, reply := range []any{"", []any{""}} {
		if _, err := decodeTombReply(reply, "token"); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("decodeTombReply(%#v) = %v, want ErrCorrupt", reply, err)
		}
	}
}

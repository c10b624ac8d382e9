package seal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A key id is up to maxKeyID letters, digits and . _ - :, each range
// checked at both ends; one byte more, or any other character, is refused.
func TestKeyIDsAreCheckedAtTheirBoundaries(t *testing.T) {
	for _, id := range []string{"az", "AZ", "09", "._-:", strings.Repeat("k", maxKeyID)} {
		if _, err := Parse("keys", []byte(id+" "+testKey(1))); err != nil {
			t.Errorf("key id %q refused: %v", id, err)
		}
	}
	for _, id := range []string{"`", "{", "@", "[", "/", ";", "!", "a b", strings.Repeat("k", maxKeyID+1)} {
		if _, err := Parse("keys", []byte(id+" "+testKey(1))); err == nil {
			t.Errorf("key id %q accepted, want it refused", id)
		}
	}
}

// In logs a keyring is its file and key ids, and no keyring is "off".
func TestKeyringLogsItsFileAndKeyIDs(t *testing.T) {
	for name, tc := range map[string]struct {
		kr   *Keyring
		want string
	}{
		"keyring":    {mustParse(t, "k1 "+testKey(1)), `"keys":{"file":"keys","seals_with":"k1","key_ids":["k1"]}`},
		"no keyring": {nil, `"keys":"off"`},
	} {
		t.Run(name, func(t *testing.T) {
			var logged bytes.Buffer
			slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "keys", tc.kr)
			if !strings.Contains(logged.String(), tc.want) {
				t.Errorf("logged %s, want %s", logged.String(), tc.want)
			}
		})
	}
}

// A derived key seals exactly epochRecords records: the last of them
// still under the epoch's prefix, the next under a new one.
func TestEpochSealsExactlyItsRecords(t *testing.T) {
	kr := mustParse(t, "k "+testKey(1))
	rec := response()
	first := kr.seal("a", rec)
	kr.keys[0].epoch.Load().sealed.Store(epochRecords - 1)
	last := kr.seal("b", rec)
	next := kr.seal("c", rec)
	if !bytes.Equal(first.Sealed.Data[:12], last.Sealed.Data[:12]) {
		t.Fatal("the epoch ended before its last record")
	}
	if bytes.Equal(last.Sealed.Data[:12], next.Sealed.Data[:12]) {
		t.Fatal("the epoch sealed a record past its last")
	}
}

// Opening keeps at most maxDerived derived keys per key, and reuses a
// kept one.
func TestDerivedKeysKeptForOpeningAreBounded(t *testing.T) {
	k := mustParse(t, "k "+testKey(1)).keys[0]
	nonce := make([]byte, nonceSize)
	for i := range maxDerived + 10 {
		binary.BigEndian.PutUint32(nonce, uint32(i))
		k.opener(nonce)
	}
	if got := len(k.derived); got != maxDerived {
		t.Fatalf("%d derived keys kept after opening %d epochs, want %d", got, maxDerived+10, maxDerived)
	}
	binary.BigEndian.PutUint32(nonce, 0)
	if g := k.opener(nonce); g != k.derived[[12]byte(nonce[:12])] {
		t.Fatal("a kept derived key was derived again")
	}
}

// The completions remembered for a retry are bounded: past maxPending
// recent ones, a new one is not remembered (its retry seals again).
func TestRememberedCompletionsAreBounded(t *testing.T) {
	s := New(newMemory(t), nil)
	now := time.Now()
	for i := range maxPending + 10 {
		s.remember(fmt.Sprint("token-", i), pendingSeal{key: "k", at: now})
	}
	if got := len(s.pending); got != maxPending {
		t.Fatalf("%d completions remembered, want at most %d", got, maxPending)
	}
}

// A sealed record that authenticates but whose sealed part disagrees with
// its readable fields, or is no record at all, does not open: only a
// faulty sealing could write one, and it reads as corrupt, not as a
// response.
func TestSealedPartThatDisagreesDoesNotOpen(t *testing.T) {
	kr := mustParse(t, "k "+testKey(1))
	k := kr.keys[0]
	sealWith := func(plain []byte, bodyBytes int) *store.Record {
		out := &store.Record{Status: 200, Sealed: &store.Sealed{KeyID: k.id, BodyBytes: bodyBytes}}
		data := make([]byte, nonceSize, nonceSize+len(plain)+tagSize)
		g := k.sealer(data)
		out.Sealed.Data = g.Seal(data, data[12:nonceSize], plain, associatedData(nil, "key", out))
		return out
	}
	for name, rec := range map[string]*store.Record{
		"body of another size": sealWith(store.AppendRecord(nil, &store.Record{Body: []byte("abc")}), 5),
		"not a record":         sealWith([]byte{9, 9, 9}, 0),
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := kr.open("key", rec); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("open = %+v, %v; want ErrCorrupt", got, err)
			}
		})
	}
}

// A full set of remembered completions makes room by forgetting those
// older than pendingAge, not those exactly that old.
func TestRememberedCompletionsOlderThanTheirAgeMakeRoom(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for name, tc := range map[string]struct {
		after      time.Duration
		remembered bool
	}{
		"exactly pendingAge later":   {pendingAge, false},
		"just over pendingAge later": {pendingAge + time.Nanosecond, true},
	} {
		t.Run(name, func(t *testing.T) {
			s := New(newMemory(t), nil)
			for i := range maxPending {
				s.remember(fmt.Sprint("token-", i), pendingSeal{key: "k", at: start})
			}
			s.remember("new", pendingSeal{key: "k", at: start.Add(tc.after)})
			if _, got := s.pending["new"]; got != tc.remembered {
				t.Fatalf("a completion %v after a full set: remembered %v, want %v", tc.after, got, tc.remembered)
			}
		})
	}
}

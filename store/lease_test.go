package store

import (
	"errors"
	"testing"
)

var sampleLease = Lease{
	Fingerprint: Fingerprint{4, 31: 9},
	Request:     sampleRequest,
	Instance:    "proxy-0/1",
	TraceID:     "4bf92f3577b34da6a3ce929d0e0e4736",
}

func TestLeaseEncodingRoundTrips(t *testing.T) {
	for name, l := range map[string]Lease{
		"full":             sampleLease,
		"fingerprint only": {Fingerprint: Fingerprint{1}},
		"instance only":    {Instance: "a"},
		"no start":         {Request: Request{Method: "POST", Path: "/p"}},
	} {
		t.Run(name, func(t *testing.T) {
			enc := AppendLease(nil, &l)
			if len(enc) != EncodedLeaseSize(&l) {
				t.Errorf("encoding is %d bytes, EncodedLeaseSize says %d", len(enc), EncodedLeaseSize(&l))
			}
			got, err := DecodeLease(enc, l.Fingerprint)
			if err != nil || got != l {
				t.Fatalf("DecodeLease = %+v, %v; want %+v", got, err, l)
			}
		})
	}
}

// A lease stored before leases were described has no description: it
// reads as a lease with its fingerprint only.
func TestLeaseWithoutDescriptionReadsAsBare(t *testing.T) {
	fp := Fingerprint{7}
	if n := EncodedLeaseSize(&Lease{Fingerprint: fp}); n != 0 {
		t.Errorf("a lease that describes nothing encodes to %d bytes, want none", n)
	}
	got, err := DecodeLease(nil, fp)
	if err != nil || got != (Lease{Fingerprint: fp}) {
		t.Fatalf("DecodeLease(nil) = %+v, %v", got, err)
	}
}

// Every truncation and a changed version byte are ErrCorrupt, never a
// panic.
func TestCorruptLeaseIsAnError(t *testing.T) {
	enc := AppendLease(nil, &sampleLease)
	for n := 1; n < len(enc); n++ {
		if _, err := DecodeLease(enc[:n], Fingerprint{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeLease of the first %d of %d bytes = %v, want ErrCorrupt", n, len(enc), err)
		}
	}
	bad := append([]byte{9}, enc[1:]...)
	if _, err := DecodeLease(bad, Fingerprint{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("DecodeLease of version 9 = %v, want ErrCorrupt", err)
	}
	if _, err := DecodeLease(append(enc, 0), Fingerprint{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("DecodeLease with a trailing byte = %v, want ErrCorrupt", err)
	}
}

// The strings DecodeLease returns do not alias its input: a store may
// decode from memory it reuses (a bbolt transaction's map).
func TestDecodedLeaseOwnsItsStrings(t *testing.T) {
	enc := AppendLease(nil, &sampleLease)
	got, err := DecodeLease(enc, sampleLease.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		enc[i] = 'x'
	}
	if got != sampleLease {
		t.Errorf("after the input changed, the lease is %+v", got)
	}
}

func FuzzDecodeLease(f *testing.F) {
	f.Add(AppendLease(nil, &sampleLease))
	f.Add([]byte{leaseVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLease(b, Fingerprint{})
		if err != nil {
			return
		}
		if again, err := DecodeLease(AppendLease(nil, &l), Fingerprint{}); err != nil || again != l {
			t.Fatalf("re-encoded lease = %+v, %v; want %+v", again, err, l)
		}
	})
}

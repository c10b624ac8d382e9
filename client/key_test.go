package client

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-([0-9a-f])[0-9a-f]{3}-[0-9a-f]{12}$`)

// checkUUID asserts s is a canonical RFC 9562 UUID of the given version.
func checkUUID(t *testing.T, s string, version string) {
	t.Helper()
	m := uuidRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q is not a canonical UUID", s)
	}
	if m[1] != version {
		t.Errorf("%q: version = %s, want %s", s, m[1], version)
	}
	if !strings.Contains("89ab", m[2]) {
		t.Errorf("%q: variant nibble = %s, want one of 8 9 a b", s, m[2])
	}
}

func TestNewKeyIsRandomUUIDv4(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		k := NewKey()
		checkUUID(t, k, "4")
		if seen[k] {
			t.Fatalf("NewKey repeated %q", k)
		}
		seen[k] = true
	}
}

func TestKeyForMatchesPythonUUID5(t *testing.T) {
	// Want values from Python:
	// uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, namespace), operationID)
	tests := []struct {
		namespace, operationID, want string
	}{
		{"https://shop.example/orders", "order-42", "d033dee1-c906-5d22-b5cb-5121b582bedc"},
		{"", "", "99454d6a-8efb-576b-96f4-fae2f0a37cde"},
	}
	for _, tt := range tests {
		got := KeyFor(tt.namespace, tt.operationID)
		if got != tt.want {
			t.Errorf("KeyFor(%q, %q) = %q, want %q", tt.namespace, tt.operationID, got, tt.want)
		}
		checkUUID(t, got, "5")
	}
	if KeyFor("a", "bc") == KeyFor("ab", "c") {
		t.Errorf("KeyFor(a, bc) == KeyFor(ab, c): namespace and id are not separated")
	}
}

func TestUUIDv5KnownVector(t *testing.T) {
	// RFC 9562 NameSpace_DNS and Python's uuid.uuid5(NAMESPACE_DNS, "python.org").
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := format(uuidV5(dns, "python.org")), "886313e1-3b8a-5372-9b90-0c9aee199e5d"; got != want {
		t.Errorf("uuidV5(DNS, python.org) = %q, want %q", got, want)
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"uuid", NewKey(), true},
		{"structured string form", `"abc"`, true},
		{"255 bytes", strings.Repeat("k", 255), true},
		{"empty", "", false},
		{"256 bytes", strings.Repeat("k", 256), false},
		{"control character", "ab\x01c", false},
		{"non-ASCII", "clé", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateKey(tt.key)
			if got := err == nil; got != tt.ok {
				t.Fatalf("validateKey(%q) = %v, want ok=%v", tt.key, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidKey) {
				t.Errorf("err = %v, want wrapping ErrInvalidKey", err)
			}
		})
	}
}

func TestOperationKeyPrecedence(t *testing.T) {
	tests := []struct {
		name      string
		header    string
		ctxKey    string
		want      string
		wantV4New bool
	}{
		{name: "header wins", header: "from-header", ctxKey: "from-ctx", want: "from-header"},
		{name: "context", ctxKey: "from-ctx", want: "from-ctx"},
		{name: "generated", wantV4New: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set(HeaderKey, tt.header)
			}
			ctx := context.Background()
			if tt.ctxKey != "" {
				ctx = WithKey(ctx, tt.ctxKey)
			}
			got, err := operationKey(ctx, req)
			if err != nil {
				t.Fatalf("operationKey: %v", err)
			}
			if tt.wantV4New {
				checkUUID(t, got, "4")
				return
			}
			if got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

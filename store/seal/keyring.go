package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// KeySize is the size of a key in the keys file, after base64 decoding:
// AES-256.
const KeySize = 32

// maxKeyID bounds a key id: it is written with every sealed record.
const maxKeyID = 64

// Keyring is the keys of a keys file. The first seals new records; every
// key opens the records it sealed. It holds no key bytes, only their
// expanded AES schedules, and prints as its file and key ids: a keyring in
// a log line, an error or --check shows nothing secret.
type Keyring struct {
	file string
	keys []*key // keys[0] seals
}

// key is one key of the ring: its id and its AES-256 block cipher, from
// which each record's own key is derived (xaes.go).
type key struct {
	id    string
	block cipher.Block
	k1    [aes.BlockSize]byte

	epoch   atomic.Pointer[epoch] // sealing
	mu      sync.RWMutex
	derived map[[12]byte]cipher.AEAD // opening, by nonce prefix
}

// FileError is a problem with one line of a keys file (Line 0: the file as
// a whole). It never quotes key material.
type FileError struct {
	File   string
	Line   int
	Reason string
}

func (e *FileError) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Reason
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// Load reads the keys file at path (see Parse).
func Load(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Reason: readFailure(err)}
	}
	return Parse(path, data)
}

// readFailure is why a keys file could not be read, without the path that
// FileError already names.
func readFailure(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return "cannot read: " + pe.Err.Error()
	}
	return "cannot read: " + err.Error()
}

// Parse reads a keys file: one key per line, "KEY_ID BASE64KEY", the key 32
// bytes once decoded (standard or URL base64, padded or not); blank lines
// and lines starting with # are ignored. The first key seals, all open. Key
// ids are 1 to 64 letters, digits, '.', '_', '-' or ':' and unique. name
// locates problems in errors.
func Parse(name string, data []byte) (*Keyring, error) {
	kr := &Keyring{file: name}
	seen := map[string]int{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		text := strings.TrimSpace(string(line))
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, &FileError{name, n, fmt.Sprintf("want KEY_ID BASE64KEY, found %d fields", len(fields))}
		}
		id := fields[0]
		if reason := checkID(id); reason != "" {
			return nil, &FileError{name, n, reason}
		}
		if first, dup := seen[id]; dup {
			return nil, &FileError{name, n, fmt.Sprintf("key id %q is already on line %d", id, first)}
		}
		seen[id] = n
		raw, err := decodeKey(fields[1])
		if err != nil {
			return nil, &FileError{name, n, fmt.Sprintf("key %q is not base64", id)}
		}
		if len(raw) != KeySize {
			return nil, &FileError{name, n, fmt.Sprintf("key %q is %d bytes after decoding, want %d (openssl rand -base64 32)", id, len(raw), KeySize)}
		}
		kr.keys = append(kr.keys, newKey(id, raw))
		clear(raw)
	}
	if len(kr.keys) == 0 {
		return nil, &FileError{File: name, Reason: "no keys: want one line KEY_ID BASE64KEY at least"}
	}
	return kr, nil
}

func checkID(id string) string {
	if len(id) > maxKeyID {
		return fmt.Sprintf("key id is %d bytes, at most %d", len(id), maxKeyID)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:", c)) {
			return fmt.Sprintf("key id %q: only letters, digits and . _ - : are allowed", id)
		}
	}
	return ""
}

// decodeKey accepts the base64 forms tools print: standard (openssl rand
// -base64) or URL-safe, padded or not.
func decodeKey(s string) ([]byte, error) {
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		var b []byte
		if b, err = enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, err
}

// File is the keys file the keyring was read from.
func (kr *Keyring) File() string { return kr.file }

// IDs are the key ids, the sealing key first; none for a nil keyring.
func (kr *Keyring) IDs() []string {
	if kr == nil {
		return nil
	}
	ids := make([]string, len(kr.keys))
	for i, k := range kr.keys {
		ids[i] = k.id
	}
	return ids
}

// String names the file and the key ids, never key material; a nil
// keyring is "off".
func (kr *Keyring) String() string {
	if kr == nil {
		return "off"
	}
	return fmt.Sprintf("keys file %s: seals with %q, opens %q", kr.file, kr.keys[0].id, kr.IDs())
}

// GoString is String, so that %#v shows no key schedule either.
func (kr *Keyring) GoString() string { return kr.String() }

// LogValue is the file and the key ids, or "off".
func (kr *Keyring) LogValue() slog.Value {
	if kr == nil {
		return slog.StringValue("off")
	}
	return slog.GroupValue(slog.String("file", kr.file), slog.String("seals_with", kr.keys[0].id),
		slog.Any("key_ids", kr.IDs()))
}

func (kr *Keyring) find(id string) *key {
	for _, k := range kr.keys {
		if k.id == id {
			return k
		}
	}
	return nil
}

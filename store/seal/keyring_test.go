package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testKey is a key of 32 bytes, all b, in base64.
func testKey(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, KeySize))
}

func mustParse(t *testing.T, lines ...string) *Keyring {
	t.Helper()
	kr, err := Parse("keys", []byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestParseKeysFile(t *testing.T) {
	url := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, KeySize))
	kr := mustParse(t,
		"# rotated 2026-03: the first key seals",
		"",
		"  2026-03 "+testKey(3)+"  ",
		"2026-01\t"+testKey(1),
		"old:url "+url,
	)
	if got, want := fmt.Sprint(kr.IDs()), "[2026-03 2026-01 old:url]"; got != want {
		t.Errorf("IDs = %s, want %s", got, want)
	}
	if kr.keys[0].id != "2026-03" {
		t.Errorf("sealing key %q, want the first line's", kr.keys[0].id)
	}
}

// Every problem names the file and the line, and says what to fix.
func TestKeysFileProblemsNameFileAndLine(t *testing.T) {
	short := base64.StdEncoding.EncodeToString(make([]byte, 24))
	tests := []struct {
		name, file, want string
	}{
		{"key not 32 bytes", "a " + testKey(1) + "\nb " + short, `keys:2: key "b" is 24 bytes after decoding, want 32 (openssl rand -base64 32)`},
		{"not base64", "a %%%%", `keys:1: key "a" is not base64`},
		{"duplicate id", "a " + testKey(1) + "\n# c\na " + testKey(2), `keys:3: key id "a" is already on line 1`},
		{"one field", "\n" + testKey(1), `keys:2: want KEY_ID BASE64KEY, found 1 fields`},
		{"three fields", "a " + testKey(1) + " b", `keys:1: want KEY_ID BASE64KEY, found 3 fields`},
		{"bad id", "a/b " + testKey(1), `keys:1: key id "a/b": only letters, digits and . _ - : are allowed`},
		{"long id", strings.Repeat("x", 65) + " " + testKey(1), `keys:1: key id is 65 bytes, at most 64`},
		{"no keys", "# nothing yet\n\n", `keys: no keys: want one line KEY_ID BASE64KEY at least`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("keys", []byte(tc.file))
			var fe *FileError
			if !errors.As(err, &fe) || err.Error() != tc.want {
				t.Fatalf("Parse = %v, want %s", err, tc.want)
			}
			if strings.Contains(err.Error(), testKey(1)) || strings.Contains(err.Error(), testKey(2)) {
				t.Errorf("error %q quotes key material", err)
			}
		})
	}
}

func TestLoadUnreadableKeysFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing")
	_, err := Load(path)
	if want := path + ": cannot read: no such file or directory"; err == nil || err.Error() != want {
		t.Fatalf("Load = %v, want %s", err, want)
	}
	ok := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(ok, []byte("k "+testKey(5)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := Load(ok)
	if err != nil || kr.File() != ok {
		t.Fatalf("Load = %v, %v; want the keyring of %s", kr, err, ok)
	}
}

// However a keyring is printed or logged, it shows its file and key ids,
// never a key.
func TestKeyringNeverPrintsKeys(t *testing.T) {
	raw := bytes.Repeat([]byte{0x5a}, KeySize)
	kr := mustParse(t, "k1 "+base64.StdEncoding.EncodeToString(raw))
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "keys", kr)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "keys", kr)
	for _, s := range []string{fmt.Sprint(kr), fmt.Sprintf("%+v", kr), fmt.Sprintf("%#v", kr), fmt.Sprintf("%v", *kr), logged.String()} {
		if !strings.Contains(s, "k1") && !strings.Contains(s, "{") {
			t.Errorf("printed keyring %q names no key id", s)
		}
		if strings.Contains(s, base64.StdEncoding.EncodeToString(raw)) || bytes.Contains([]byte(s), raw) ||
			strings.Contains(s, fmt.Sprintf("%x", raw[:8])) {
			t.Errorf("printed keyring %q shows the key", s)
		}
	}
}

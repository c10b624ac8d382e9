package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// KeySourceKind says where in a request a KeySource looks for the key.
// Each kind is a type of its own, in a file of its own
// (keysource_header.go, …), registered in keyKinds: its constant, its
// configuration form, its checks, how it names itself to a client and how
// it finds a key are all there (docs/architecture.md, "Adding a key
// source").
type KeySourceKind uint8

// keyKind is one kind of key source.
type keyKind interface {
	// kind is the kind's constant.
	kind() KeySourceKind
	// form is the kind's configuration form, its word then any argument
	// ("header:NAME", "body_sha256"). The word is also, for a key derived
	// from the payload, its namespace in the storage key: it cannot be
	// renamed once released.
	form() string
	// fromPayload reports whether the key is derived from the request
	// body: the body must be read before the key is known, and the key is
	// the payload's, not a client's choice, so its storage key is
	// namespaced by method, host and path (storageKeyFrom).
	fromPayload() bool
	// parse reads the argument of the configuration form s (arg, trimmed);
	// only a kind whose form takes one is asked.
	parse(s, arg string) (KeySource, error)
	// check reports why a source of this kind built in code cannot find a
	// key.
	check(k KeySource) error
	// arg is the argument of k's configuration form, "" for none.
	arg(k KeySource) string
	// describe names k for a client, in a missing-key problem's detail.
	describe(k KeySource) string
	// header is the name of the header k reads, "" when it reads none: an
	// operator's key is read from it as a client would send it. forwarded
	// is the header that carries k's key to the upstream, "" when none
	// does: it is kept when a client names it in Connection, so the
	// upstream reads the key the proxy read.
	header(k KeySource) string
	forwarded(k KeySource) string
	// extract returns the key k finds in r (body is its whole body once
	// read, neither copied nor kept), errNoKey when r does not carry one,
	// or why the key it carries is invalid.
	extract(k *KeySource, r *http.Request, body []byte) (string, error)
}

// keyKinds are the kinds of key source, in the order the configuration's
// errors list their forms: the one registration of a kind.
var keyKinds = []keyKind{
	headerSource{},
	querySource{},
	cookieSource{},
	jsonSource{},
	bodySHA256Source{},
}

// kindInfo is a registered kind with what the request path asks of it
// often, worked out once.
type kindInfo struct {
	keyKind
	word     string // form's word
	takesArg bool   // form has an argument
	payload  bool   // fromPayload
}

// kinds maps each KeySourceKind to its kind, nil for none: indexed by a
// uint8, it needs no bounds check.
var kinds = func() (out [256]kindInfo) {
	for _, k := range keyKinds {
		word, _, arg := strings.Cut(k.form(), ":")
		out[k.kind()] = kindInfo{keyKind: k, word: word, takesArg: arg, payload: k.fromPayload()}
	}
	return out
}()

// keySourceForms lists every kind's form, for the configuration's errors.
var keySourceForms = func() string {
	var b strings.Builder
	for i, k := range keyKinds {
		switch {
		case i == 0:
		case i == len(keyKinds)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(k.form())
	}
	return b.String()
}()

// of returns k's kind, nil for none.
func (k KeySourceKind) of() keyKind { return kinds[k].keyKind }

// word is the kind's name in the configuration form, and, for a key
// derived from the payload, its namespace in the storage key.
func (k KeySourceKind) word() string { return kinds[k].word }

// fromPayload reports whether a key of this kind is derived from the
// request body (keyKind.fromPayload).
func (k KeySourceKind) fromPayload() bool { return kinds[k].payload }

// header is the name of the header the source reads, "" when it reads
// none (keyKind.header).
func (k KeySource) header() string {
	if kk := k.Kind.of(); kk != nil {
		return kk.header(k)
	}
	return ""
}

// forwarded is the header that carries the source's key to the upstream,
// "" when none does (keyKind.forwarded).
func (k KeySource) forwarded() string {
	if kk := k.Kind.of(); kk != nil {
		return kk.forwarded(k)
	}
	return ""
}

// KeySource is one place an idempotency key may come from, written
// "header:NAME", "query:NAME", "cookie:NAME", "json:/pointer" or
// "body_sha256" in the configuration (docs/request-handling.md, "Where the key comes from").
// A route's sources are tried in order and the first one present gives the
// key, so clients that cannot send an Idempotency-Key header (webhook
// senders, partners with an order id in the payload) are still protected.
type KeySource struct {
	Kind KeySourceKind
	// Name is the header's canonical name, the query parameter's name, or
	// the cookie's name.
	Name string
	// Pointer locates the key in a JSON body (KeyFromJSON).
	Pointer jsonread.Pointer
}

// parseKeySource parses the configuration form of a key source.
func parseKeySource(s string) (KeySource, error) {
	word, arg, hasArg := strings.Cut(s, ":")
	var kind *kindInfo
	for _, kk := range keyKinds {
		if info := &kinds[kk.kind()]; info.word == word {
			kind = info
		}
	}
	switch {
	case !hasArg && kind != nil && !kind.takesArg:
		return KeySource{Kind: kind.kind()}, nil
	case !hasArg && s == "":
		return KeySource{}, errors.New("empty key source: want " + keySourceForms)
	case !hasArg:
		return KeySource{}, fmt.Errorf("key source %q: want %s", s, keySourceForms)
	case kind == nil:
		return KeySource{}, fmt.Errorf("key source %q: unknown kind %q: want %s", s, word, keySourceForms)
	case !kind.takesArg:
		return KeySource{}, fmt.Errorf("key source %q: %s takes no argument", s, word)
	}
	return kind.parse(s, strings.TrimSpace(arg))
}

// check reports why a source built in code cannot find a key; a parsed
// source is valid.
func (k KeySource) check() error {
	kk := k.Kind.of()
	if kk == nil {
		return errors.New("empty key source: want " + keySourceForms)
	}
	return kk.check(k)
}

// String returns the configuration form of the source.
func (k KeySource) String() string {
	if kk := k.Kind.of(); kk != nil && kinds[k.Kind].takesArg {
		return k.Kind.word() + ":" + kk.arg(k)
	}
	return k.Kind.word()
}

// MarshalText returns the configuration form of the source.
func (k KeySource) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the configuration form, as parseKeySource.
func (k *KeySource) UnmarshalText(text []byte) error {
	s, err := parseKeySource(string(text))
	if err != nil {
		return err
	}
	*k = s
	return nil
}

// readsBody reports whether the source needs the request body.
func (k KeySource) readsBody() bool { return k.Kind.fromPayload() }

// describe names the source for a client, in a problem's detail.
func (k KeySource) describe() string {
	if kk := k.Kind.of(); kk != nil {
		return kk.describe(k)
	}
	return ""
}

// describeKeySources names what a request must carry for sources to find
// a key, for the detail of a missing-key problem: "the Idempotency-Key
// header or a JSON string or integer at /id in the body".
func describeKeySources(sources []KeySource) string {
	var b strings.Builder
	for i, k := range sources {
		switch {
		case i == 0:
		case i == len(sources)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(k.describe())
	}
	return b.String()
}

var (
	// errNeedBody means requestKeyFrom reached a source that reads the body
	// before the caller read it: read it (bounded) and ask again.
	errNeedBody = errors.New("the idempotency key may be in the request body")

	errKeyEscape = errors.New("the idempotency key is not validly percent-encoded")
)

// keySourceError is a key that a source found but that is not valid. It
// names the source, so a client learns where the proxy looked.
type keySourceError struct {
	source KeySource
	err    error
}

func (e *keySourceError) Error() string { return e.err.Error() + " (" + e.source.String() + ")" }
func (e *keySourceError) Unwrap() error { return e.err }

// requestKeyFrom returns the idempotency key from the first of sources
// present in r, and the kind of the source that gave it. It returns errNoKey when none is, errNeedBody when it reached a
// source that reads the body and haveBody is false, and any other error
// (a *keySourceError) for a key that is present but invalid: 400
// invalid-key. A present but invalid key never falls through to the next
// source, or a client's typo would silently pick another key.
//
// body is the whole request body, already read; it is neither copied nor
// kept.
func requestKeyFrom(r *http.Request, sources []KeySource, body []byte, haveBody bool) (string, KeySourceKind, error) {
	return requestKeyFromDecoded(r, sources, body, nil, haveBody)
}

// requestKeyFromDecoded is requestKeyFrom where plain, when not nil, is
// body decoded from its Content-Encoding (inflated): json: sources read
// it instead of body.
func requestKeyFromDecoded(r *http.Request, sources []KeySource, body, plain []byte, haveBody bool) (string, KeySourceKind, error) {
	for i := range sources {
		k := &sources[i]
		if k.readsBody() && !haveBody {
			return "", 0, errNeedBody
		}
		b := body
		if plain != nil && k.Kind == KeyFromJSON {
			b = plain
		}
		key, err := k.extract(r, b)
		switch {
		case err == errNoKey:
			continue
		case errors.Is(err, jsonread.ErrDuplicateName):
			return "", 0, err // the body's fault, not the key's
		case err != nil:
			return "", 0, &keySourceError{source: *k, err: err}
		}
		return key, k.Kind, nil
	}
	return "", 0, errNoKey
}

// extract returns the key this source finds, errNoKey, or why it is invalid.
func (k *KeySource) extract(r *http.Request, body []byte) (string, error) {
	if kk := k.Kind.of(); kk != nil {
		return kk.extract(k, r, body)
	}
	return "", errNoKey
}

package graphqlop

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// Kind is the kind of operation a request runs.
type Kind uint8

const (
	// None: the document holds no operation (the server refuses it).
	None Kind = iota
	Query
	Mutation
	Subscription
	// Persisted: a persisted query sent by its hash alone (automatic
	// persisted queries, Apollo's and gqlgen's): the document it runs is
	// the one the server keeps under the hash, which it may run or may not
	// know (PersistedQueryNotFound), so it is read as a mutation may be.
	Persisted
)

func (k Kind) String() string {
	switch k {
	case Query:
		return "query"
	case Mutation:
		return "mutation"
	case Subscription:
		return "subscription"
	case Persisted:
		return "persisted"
	}
	return "none"
}

var (
	// ErrNotGraphQL means a body is not a GraphQL request this package
	// reads: not JSON holding a "query" string nor an application/graphql
	// document, or a document that does not parse.
	ErrNotGraphQL = errors.New("not a GraphQL request")
	// ErrAmbiguous means a GraphQL request can be read more than one way
	// where one of the readings is a mutation. The error is an *Error.
	ErrAmbiguous = errors.New("the GraphQL request can be read more than one way")
	// ErrInvalidKey means a mutation's @idempotent directive has no key
	// this package can read. The error is an *Error.
	ErrInvalidKey = errors.New("the @idempotent directive has no readable key")
)

// Error is an ambiguous request or an unreadable directive key, with the
// reason a client is told.
type Error struct {
	Err    error // ErrAmbiguous or ErrInvalidKey
	Reason string
}

func (e *Error) Error() string { return e.Reason }
func (e *Error) Unwrap() error { return e.Err }

func ambiguous(format string, args ...any) error {
	return &Error{Err: ErrAmbiguous, Reason: fmt.Sprintf(format, args...)}
}

func invalidKey(format string, args ...any) error {
	return &Error{Err: ErrInvalidKey, Reason: fmt.Sprintf(format, args...)}
}

// MaxTokens bounds the tokens of a document the parser reads; a longer
// document is ErrNotGraphQL. The parser bounds nesting itself
// (parser.MaxNestingDepth).
const MaxTokens = 1 << 16

// Request is what a GraphQL request asks.
type Request struct {
	// Kind is the kind of the operation the request runs; for a batch
	// (which holds no mutation, or it is refused), Query.
	Kind Kind
	// Key is the key of the mutation's @idempotent directive, on the
	// operation or on one of its top-level fields; HasKey says whether
	// there is one.
	Key    string
	HasKey bool
	// Document, OperationName and Variables are as sent; Variables is
	// the raw JSON object (a slice of the body, or the object a variables
	// string holds), nil when there is none (variables).
	Document      string
	OperationName string
	Variables     []byte
	// Batch is set for a JSON array of requests.
	Batch bool
	// Parts is the SHA-256 of an upload's parts beside its operations
	// (readUpload), nil for any other request.
	Parts []byte
	// Hash is the sha256Hash of a persisted query's
	// extensions.persistedQuery, "" for a request without one. A request
	// sent with its document and a hash is read by its document, which
	// the hash must name (the lowercase hex SHA-256 of the document, as
	// every client computes it): servers refuse one that does not.
	Hash string
}

var (
	ptrQuery         = mustPointer("/query")
	ptrOperationName = mustPointer("/operationName")
	ptrVariables     = mustPointer("/variables")
	ptrHash          = mustPointer("/extensions/persistedQuery/sha256Hash")
)

func mustPointer(s string) jsonread.Pointer {
	p, err := jsonread.ParsePointer(s)
	if err != nil {
		panic(err)
	}
	return p
}

// ReadBody reads the body of a POST: an application/graphql document, an
// application/x-www-form-urlencoded form (readForm), or (any other
// content type) a JSON object {query, variables,
// operationName, extensions} or a batch, an array of them. A JSON member
// name is matched case-insensitively, as names are unique that way
// (jsonread) and a Go server matches them so.
func ReadBody(contentType string, body []byte) (Request, error) {
	mt, params, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/graphql":
		return readDocument(string(body), "", nil)
	case "application/x-www-form-urlencoded":
		return readForm(string(body))
	case "multipart/form-data":
		return readUpload(body, params["boundary"])
	}
	return readJSON(body)
}

// notJSON is the error of a body jsonread refuses: ambiguous when it
// repeats a member name, else not GraphQL.
func notJSON(err error) error {
	if errors.Is(err, jsonread.ErrDuplicateName) {
		return &Error{Err: ErrAmbiguous, Reason: "the JSON body can be read more than one way: " + err.Error()}
	}
	return ErrNotGraphQL
}

// first is the first byte of a JSON text, after a byte order mark and
// whitespace.
func first(body []byte) byte {
	body = bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(body) == 0 {
		return 0
	}
	return body[0]
}

// readForm reads a form body, whose query, variables (a JSON object) and
// operationName fields express-graphql and graphql-go/handler read as the
// members of a JSON request. Each field is read as every server may split
// the form (params): a field with two values, where the form holds a
// mutation, is ambiguous; without one, the form is left to the route's
// key sources as before.
func readForm(form string) (Request, error) {
	var fields [3]string
	for i, name := range []string{"query", "operationName", "variables"} {
		vs := params(form, name)
		if len(vs) == 0 {
			continue
		}
		for _, v := range vs[1:] {
			if v != vs[0] {
				if MutationInQuery(form) {
					return Request{}, ambiguous("the form's %s field has more than one value, and servers differ on which one they read: send it once", name)
				}
				return Request{}, ErrNotGraphQL
			}
		}
		fields[i] = vs[0]
	}
	if fields[0] == "" {
		return Request{}, ErrNotGraphQL
	}
	var obj []byte
	if fields[2] != "" {
		// A variables field that is not JSON is none, as graphql-go/handler
		// runs the form (express-graphql refuses it).
		obj = []byte(`{"variables":` + fields[2] + "}")
		if err := jsonread.Validate(obj); errors.Is(err, jsonread.ErrDuplicateName) {
			return Request{}, notJSON(err)
		} else if err != nil {
			obj = nil
		}
	}
	return readDocument(fields[0], fields[1], obj)
}

// readUpload reads a GraphQL multipart request (the file upload form of
// graphql-upload and Apollo): the JSON request, or batch, in its
// operations field, as readJSON reads a body. The other parts (the map
// and the files) are part of what a mutation's fingerprint hashes, each
// part's name, file name and bytes, never its boundary, which a client
// draws anew for each attempt. A body that does not parse, or has no
// operations field, is left to the route's key sources; one with two
// operations fields, where one holds a mutation, is ambiguous.
func readUpload(body []byte, boundary string) (Request, error) {
	if boundary == "" {
		return Request{}, ErrNotGraphQL
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var ops []byte
	found := 0
	h := sha256.New()
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Request{}, ErrNotGraphQL
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return Request{}, ErrNotGraphQL
		}
		if p.FormName() == "operations" && p.FileName() == "" {
			if found++; found == 1 {
				ops = v
				continue
			}
			if !bytes.Equal(v, ops) && (bytes.Contains(v, []byte("mutation")) || bytes.Contains(ops, []byte("mutation"))) {
				return Request{}, ambiguous("the upload has more than one operations field, and servers differ on which one they read: send it once")
			}
			continue
		}
		for _, f := range [][]byte{[]byte(p.FormName()), []byte(p.FileName()), v} {
			h.Write(binary.AppendUvarint(nil, uint64(len(f))))
			h.Write(f)
		}
	}
	if found == 0 {
		return Request{}, ErrNotGraphQL
	}
	r, err := readJSON(ops)
	if err != nil || r.Kind != Mutation && r.Kind != Persisted {
		return r, err
	}
	r.Parts = h.Sum(nil)
	return r, nil
}

// readJSON reads a JSON request object or batch.
func readJSON(body []byte) (Request, error) {
	switch first(body) {
	case '{':
		return readObject(body) // its first look-up checks the whole body
	case '[':
		if err := jsonread.Validate(body); err != nil {
			return Request{}, notJSON(err)
		}
		return readBatch(body)
	}
	return Request{}, ErrNotGraphQL
}

// readObject reads one request object. Find checks the whole of obj
// before it looks: the first look-up refuses what is not one JSON text
// with unique member names.
func readObject(obj []byte) (Request, error) {
	q, err := ptrQuery.Find(obj)
	if err != nil && err != jsonread.ErrNotFound {
		return Request{}, notJSON(err)
	}
	var hash string
	if v, err := ptrHash.Find(obj); err == nil && v[0] == '"' {
		hash = jsonread.Unquote(v)
	}
	// An operationName that is not a string is none: express-graphql and
	// graphql-go/handler run the request so.
	var name string
	if v, err := ptrOperationName.Find(obj); err == nil && v[0] == '"' {
		name = jsonread.Unquote(v)
	}
	switch {
	case hash != "" && (err == jsonread.ErrNotFound || q[0] == 'n'):
		return readPersisted(hash, name, obj)
	case err == jsonread.ErrNotFound, q[0] != '"':
		return Request{}, ErrNotGraphQL // no document, or not GraphQL
	}
	doc := jsonread.Unquote(q)
	r, err := readDocument(doc, name, obj)
	if err != nil || hash == "" || r.Kind != Mutation {
		return r, err
	}
	if sum := sha256.Sum256([]byte(doc)); hex.EncodeToString(sum[:]) != hash {
		return Request{}, ambiguous("the persisted query's sha256Hash does not name the document sent with it, and servers differ on which of the two they run")
	}
	r.Hash = hash
	return r, nil
}

// readPersisted reads a persisted query sent by its hash alone, with its
// operationName and variables as a mutation's are read.
func readPersisted(hash, name string, obj []byte) (Request, error) {
	vars, err := variables(obj)
	if err != nil {
		return Request{}, err
	}
	return Request{Kind: Persisted, OperationName: name, Variables: vars, Hash: hash}, nil
}

// variables returns the variables of a request object as the servers that
// run it read them: a JSON object; the object a JSON string holds, which
// express-graphql and graphql-go/handler parse (GraphiQL once sent
// variables so); nil for anything else — absent, null, another value, a
// string holding no object, or no request object (application/graphql) —
// which those servers run as no variables, and others refuse.
func variables(obj []byte) ([]byte, error) {
	if obj == nil {
		return nil, nil
	}
	vars, err := ptrVariables.Find(obj)
	switch {
	case err != nil:
		return nil, nil
	case vars[0] == '"':
		return objectIn(jsonread.Unquote(vars))
	case vars[0] != '{':
		return nil, nil
	}
	return vars, nil
}

// objectIn is the JSON object a variables string holds, nil when it holds
// none; one that repeats a member name is ambiguous, as a body is.
func objectIn(s string) ([]byte, error) {
	b := []byte(s)
	if first(b) != '{' {
		return nil, nil
	}
	if err := jsonread.Validate(b); err != nil {
		if errors.Is(err, jsonread.ErrDuplicateName) {
			return nil, notJSON(err)
		}
		return nil, nil
	}
	return b, nil
}

// readBatch reads a batch: an array of request objects, a valid JSON text.
// A batch holding a mutation is refused: its executions, results and
// their order are each server's own.
func readBatch(body []byte) (Request, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(body, &elems); err != nil {
		return Request{}, ErrNotGraphQL
	}
	for i, e := range elems {
		if first(e) != '{' {
			return Request{}, ErrNotGraphQL
		}
		r, err := readObject(e)
		switch {
		case err != nil:
			return Request{}, err
		case r.Kind == Persisted:
			// A batch is protected as any request, as it was before
			// persisted queries were read.
			return Request{}, ErrNotGraphQL
		case r.Kind == Mutation:
			return Request{}, ambiguous("the batch holds a mutation (element %d): a batch's executions are the server's own, so one key cannot stand for it; send the mutation on its own", i)
		}
	}
	return Request{Kind: Query, Batch: true}, nil
}

// readDocument parses doc and finds the operation name selects; obj is
// the request object, whose variables only a mutation reads.
func readDocument(doc, name string, obj []byte) (Request, error) {
	d, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: doc}, MaxTokens)
	if err != nil {
		return Request{}, ErrNotGraphQL
	}
	r := Request{Document: doc, OperationName: name}
	var op *ast.OperationDefinition
	mutations := 0
	for _, o := range d.Operations {
		if o.Operation == ast.Mutation {
			mutations++
		}
		if name != "" && o.Name == name {
			if op != nil {
				return Request{}, ambiguous("two operations are named %q", name)
			}
			op = o
		}
	}
	switch {
	case name != "" && op == nil:
		return Request{}, ambiguous("the operationName %q names no operation in the document", name)
	case len(d.Operations) > 1 && mutations > 0:
		return Request{}, ambiguous("the document holds %d operations, %d of them mutations: send one operation per request", len(d.Operations), mutations)
	case len(d.Operations) == 0:
		return r, nil
	case op == nil:
		op = d.Operations[0]
	}
	switch op.Operation {
	case ast.Mutation:
		r.Kind = Mutation
	case ast.Subscription:
		r.Kind = Subscription
		return r, nil
	default:
		r.Kind = Query
		return r, nil
	}
	if r.Variables, err = variables(obj); err != nil {
		return Request{}, err
	}
	k := keys{doc: d, op: op, vars: r.Variables}
	k.directives(op.Directives)
	k.selections(op.SelectionSet, 0)
	if k.err != nil {
		return Request{}, k.err
	}
	r.Key, r.HasKey = k.key, k.found
	return r, nil
}

// keys collects the @idempotent keys of a mutation: on the operation, and
// on its top-level fields (Shopify's form), through inline fragments and
// fragment spreads.
type keys struct {
	doc   *ast.QueryDocument
	op    *ast.OperationDefinition
	vars  []byte
	key   string
	found bool
	err   error
}

// DirectiveName is the directive whose key argument gives the key.
const DirectiveName = "idempotent"

func (k *keys) directives(ds ast.DirectiveList) {
	for _, d := range ds {
		if d.Name != DirectiveName || k.err != nil {
			continue
		}
		n := 0
		for _, a := range d.Arguments {
			if a.Name != "key" {
				continue
			}
			n++
			k.add(k.value(a.Value))
		}
		if n == 0 && k.err == nil {
			k.err = invalidKey("@%s has no key argument", DirectiveName)
		}
	}
}

func (k *keys) selections(set ast.SelectionSet, depth int) {
	if depth > len(k.doc.Fragments) { // a fragment cycle; the server refuses it
		return
	}
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			k.directives(s.Directives)
		case *ast.InlineFragment:
			k.selections(s.SelectionSet, depth)
		case *ast.FragmentSpread:
			if f := k.doc.Fragments.ForName(s.Name); f != nil {
				k.selections(f.SelectionSet, depth+1)
			}
		}
	}
}

// value is the key a directive's argument gives: a string, or a variable
// holding one (its value, else its default).
func (k *keys) value(v *ast.Value) (string, error) {
	switch {
	case v == nil:
		return "", invalidKey("@%s has no key value", DirectiveName)
	case v.Kind == ast.StringValue || v.Kind == ast.BlockValue:
		return v.Raw, nil
	case v.Kind != ast.Variable:
		return "", invalidKey("@%s(key:) is not a string", DirectiveName)
	}
	if k.vars != nil {
		// A variable's name is a GraphQL name: no "~" or "/" to escape.
		p, err := jsonread.ParsePointer("/" + v.Raw)
		if err == nil {
			switch j, err := p.Find(k.vars); {
			case err == nil && j[0] == '"':
				return jsonread.Unquote(j), nil
			case err == nil && j[0] != 'n':
				return "", invalidKey("@%s(key: $%s): the variable is not a string", DirectiveName, v.Raw)
			}
		}
	}
	if def := k.op.VariableDefinitions.ForName(v.Raw); def != nil && def.DefaultValue != nil && def.DefaultValue.Kind == ast.StringValue {
		return def.DefaultValue.Raw, nil
	}
	return "", invalidKey("@%s(key: $%s): the variable has no value", DirectiveName, v.Raw)
}

func (k *keys) add(key string, err error) {
	switch {
	case k.err != nil:
	case err != nil:
		k.err = err
	case !k.found:
		k.key, k.found = key, true
	case key != k.key:
		k.err = ambiguous("the mutation names two @%s keys", DirectiveName)
	}
}

// MutationInQuery reports whether a request's query string carries a
// mutation in any of its query parameters. GraphQL over HTTP forbids
// mutations over GET, but a server that executes one anyway would run it
// unprotected; and some servers (graphql-go/handler, express-graphql)
// read the query string before the body of any method.
func MutationInQuery(rawQuery string) bool {
	if rawQuery == "" {
		return false
	}
	for _, doc := range queryParams(rawQuery) {
		d, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: doc}, MaxTokens)
		if err != nil {
			// Past MaxTokens or parser.MaxNestingDepth this parser gives
			// up where graphql-js reads on: a document it cannot read may
			// still be a mutation to the server.
			if namesMutation(doc) {
				return true
			}
			continue
		}
		for _, o := range d.Operations {
			if o.Operation == ast.Mutation {
				return true
			}
		}
	}
	return false
}

// queryParams returns every value a server may read as the "query"
// parameter of rawQuery. url.ParseQuery drops a pair holding a ";" or a
// malformed escape, where Node's URLSearchParams keeps it, ";" and "%"
// as they are, and Rack before 3 splits at ";" as at "&": a ";" or a "%"
// in a comment or a string leaves a mutation a mutation to graphql-js.
func queryParams(rawQuery string) []string { return params(rawQuery, "query") }

// params returns every value a server may read as the parameter name of
// a query string or form, as queryParams reads "query".
func params(rawQuery, name string) []string {
	var docs []string
	add := func(pair string) {
		k, v, _ := strings.Cut(pair, "=")
		if unescapeLeniently(k) == name {
			docs = append(docs, unescapeLeniently(v))
		}
	}
	for _, pair := range strings.Split(rawQuery, "&") {
		add(pair)
		if strings.Contains(pair, ";") {
			for _, p := range strings.Split(pair, ";") {
				add(p)
			}
		}
	}
	return docs
}

// unescapeLeniently decodes s as a form value, as the WHATWG URL standard
// does: "+" is a space, a "%" not followed by two hex digits stays.
func unescapeLeniently(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s):
			if v, err := hex.DecodeString(s[i+1 : i+3]); err == nil {
				b = append(b, v[0])
				i += 2
				continue
			}
			b = append(b, c)
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// namesMutation reports whether doc holds the name "mutation" on its own,
// as the keyword of every mutation operation is written: a document
// without it runs no mutation in any GraphQL parser.
func namesMutation(doc string) bool {
	const kw = "mutation"
	for i := 0; ; {
		j := strings.Index(doc[i:], kw)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(kw)
		if (start == 0 || !nameByte(doc[start-1])) && (end == len(doc) || !nameByte(doc[end])) {
			return true
		}
		i = end
	}
}

// nameByte reports whether c may be part of a GraphQL name.
func nameByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// Canonical is AppendCanonical into a new slice of the size it needs.
func (r *Request) Canonical() ([]byte, error) {
	n := len("graphql-persisted\n") + 2*binary.MaxVarintLen64 + max(len(r.Document), len(r.Hash)) + len(r.OperationName) + max(len(r.Variables), 2)
	return r.AppendCanonical(make([]byte, 0, n))
}

// AppendCanonical appends what a mutation's fingerprint hashes: the
// document and the operation name as sent, each length-prefixed, then the
// variables in jsonread's canonical form (absent and null as {}). A
// persisted query's hash stands for its document, with or without it, so
// that the hash alone and the document sent after it are one request. It
// fails only for variables jsonread refuses, which ReadBody never returns.
func (r *Request) AppendCanonical(dst []byte) ([]byte, error) {
	if r.Hash != "" {
		dst = append(dst, "graphql-persisted\n"...)
		dst = binary.AppendUvarint(dst, uint64(len(r.Hash)))
		dst = append(dst, r.Hash...)
	} else {
		dst = append(dst, "graphql\n"...)
		dst = binary.AppendUvarint(dst, uint64(len(r.Document)))
		dst = append(dst, r.Document...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.OperationName)))
	dst = append(dst, r.OperationName...)
	if r.Parts != nil {
		// After the length-prefixed fields, before the variables: a
		// request without parts hashes what it hashed before.
		dst = append(dst, "parts\n"...)
		dst = append(dst, r.Parts...)
	}
	if r.Variables == nil {
		return append(dst, "{}"...), nil
	}
	return jsonread.AppendCanonical(dst, r.Variables, nil)
}

// Package contract reads clients/contract.json, the one list of the proxy's
// problem types and of what a client does with each answer, for the tests
// that hold the proxy, the admin API and the clients to it.
package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
)

// Actions a client takes on an answer.
const (
	Retry = "retry" // same request, same key, after Retry-After or backoff
	Stop  = "stop"  // report the problem; retrying cannot change it
	Done  = "done"  // the operation's answer
	Poll  = "poll"  // GET the status URL of a 202 under Prefer: respond-async
	// Resend decides a poll's answer marked released as the request's own,
	// a retry sending the request again with its key.
	Resend = "resend"
)

// Listeners a problem type is answered on.
const (
	ListenerProxy = "proxy"
	ListenerAdmin = "admin"
)

// Problem is one problem type and what a client does with it.
type Problem struct {
	Type       string   `json:"type"` // suffix of ProblemBase
	Status     int      `json:"status"`
	RetryAfter bool     `json:"retry_after"` // the answer carries Retry-After
	Listeners  []string `json:"listeners"`
	Client     string   `json:"client"`          // Retry or Stop
	Error      string   `json:"error,omitempty"` // the typed error clients raise, if any
	// GRPC is the status code name a gRPC call gets for it (ABORTED);
	// every problem of the proxy listener has one.
	GRPC string `json:"grpc,omitempty"`
}

// GRPCCode is p's gRPC status code.
func (p Problem) GRPCCode() (grpcwire.Code, error) {
	var c grpcwire.Code
	err := c.UnmarshalText([]byte(p.GRPC))
	return c, err
}

// On reports whether p is answered on listener.
func (p Problem) On(listener string) bool { return slices.Contains(p.Listeners, listener) }

// Contract is the whole file.
type Contract struct {
	About        string            `json:"about"`
	Actions      map[string]string `json:"actions"` // action → what it means
	ProblemBase  string            `json:"problem_base"`
	Problems     []Problem         `json:"problems"`
	OtherAnswers struct {
		About         string `json:"about"`
		Replayed      string `json:"replayed"`
		RetryStatuses []int  `json:"retry_statuses"`
		Otherwise     string `json:"otherwise"`
		// Redirect is what a client does with a 3xx: Done, never
		// followed with the key.
		Redirect string `json:"redirect"`
	} `json:"other_answers"`
	// AcceptedAsync is the 202 a client that sent Prefer: respond-async
	// gets while its operation runs.
	AcceptedAsync struct {
		About      string   `json:"about"`
		Status     int      `json:"status"`
		RetryAfter bool     `json:"retry_after"`
		Headers    []string `json:"headers"`
		Client     string   `json:"client"`
		// ReleasedHeader marks a poll's answer of a request whose key
		// was released; Released is what a client does with it (Resend).
		ReleasedHeader string `json:"released_header"`
		Released       string `json:"released"`
	} `json:"accepted_async"`
	// GraphQL is how the proxy's answers read on a GraphQL route: the
	// extensions.code of each problem type answered on the proxy listener.
	GraphQL struct {
		About string            `json:"about"`
		Codes map[string]string `json:"codes"` // problem type → code
	} `json:"graphql"`
	// GRPC says how a gRPC call is told a problem: the metadata fields
	// holding its type, its retry advice, and the replay mark.
	GRPC struct {
		About    string `json:"about"`
		TypeIn   string `json:"type_in"`
		Pushback string `json:"pushback"`
		Replayed string `json:"replayed"`
		// RetryCodes are the status codes a client retries when the
		// status carries no proxy problem type.
		RetryCodes []string `json:"retry_codes"`
	} `json:"grpc"`
	NetworkError   string `json:"network_error"`
	AttemptTimeout string `json:"attempt_timeout"`
}

// Path is where the file lives, relative to the module root.
const Path = "clients/contract.json"

// Load reads and checks the contract, found from dir (a package directory
// inside the module) upwards.
func Load(dir string) (*Contract, error) {
	path, err := find(dir)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Contract
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// ByType returns the problem named t (a suffix of ProblemBase).
func (c *Contract) ByType(t string) (Problem, bool) {
	for _, p := range c.Problems {
		if p.Type == t {
			return p, true
		}
	}
	return Problem{}, false
}

// Action is what a client does with an answer that carries no proxy problem
// type, or a problem type the contract does not list.
func (c *Contract) Action(status int, replayed bool) string {
	switch {
	case replayed:
		return c.OtherAnswers.Replayed
	case slices.Contains(c.OtherAnswers.RetryStatuses, status):
		return Retry
	}
	return c.OtherAnswers.Otherwise
}

func (c *Contract) check() error {
	var errs []error
	seen := map[string]bool{}
	for _, p := range c.Problems {
		switch {
		case p.Type == "" || seen[p.Type]:
			errs = append(errs, fmt.Errorf("problem type %q empty or listed twice", p.Type))
		case p.Status < 400 || p.Status > 599:
			errs = append(errs, fmt.Errorf("problem %s: status %d is not an error", p.Type, p.Status))
		case p.Client != Retry && p.Client != Stop:
			errs = append(errs, fmt.Errorf("problem %s: client %q, want %q or %q", p.Type, p.Client, Retry, Stop))
		case len(p.Listeners) == 0:
			errs = append(errs, fmt.Errorf("problem %s: no listeners", p.Type))
		case p.On(ListenerProxy) || p.GRPC != "":
			if _, err := p.GRPCCode(); err != nil {
				errs = append(errs, fmt.Errorf("problem %s: grpc: %w", p.Type, err))
			}
		}
		seen[p.Type] = true
	}
	if a := c.AcceptedAsync; a.Status != 202 || a.Client != Poll || !slices.Contains(a.Headers, "Location") {
		errs = append(errs, fmt.Errorf("accepted_async: status %d, client %q, headers %q; want 202, %q and Location", a.Status, a.Client, a.Headers, Poll))
	}
	if a := c.AcceptedAsync; a.ReleasedHeader == "" || a.Released != Resend {
		errs = append(errs, fmt.Errorf("accepted_async: released_header %q, released %q; want a header and %q", a.ReleasedHeader, a.Released, Resend))
	}
	if r := c.OtherAnswers.Redirect; r != Done {
		errs = append(errs, fmt.Errorf("other_answers: redirect %q, want %q: a redirect is never followed with the key", r, Done))
	}
	if c.ProblemBase == "" {
		errs = append(errs, errors.New("problem_base is empty"))
	}
	return errors.Join(errs...)
}

func find(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, Path), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("contract: no go.mod above the working directory")
		}
		dir = parent
	}
}

// DeclaredTypes lists the problem types a package's non-test Go files in dir
// declare with composite literals of the named struct type whose first field
// is base + "name", as in problem{ProblemBase + "in-flight", ...}. It lets a
// test check that the package's list of problems leaves none out.
func DeclaredTypes(dir, structName, baseIdent string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || len(lit.Elts) == 0 || !isIdent(lit.Type, structName) {
				return true
			}
			if name, ok := typeSuffix(lit.Elts[0], baseIdent); ok {
				names = append(names, name)
			}
			return true
		})
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// typeSuffix reads base + "name", or base.Field + "name" when baseIdent is
// a selector such as proxy.ProblemBase.
func typeSuffix(e ast.Expr, baseIdent string) (string, bool) {
	if kv, ok := e.(*ast.KeyValueExpr); ok {
		e = kv.Value
	}
	bin, ok := e.(*ast.BinaryExpr)
	if !ok || bin.Op != token.ADD {
		return "", false
	}
	switch x := bin.X.(type) {
	case *ast.Ident:
		if x.Name != baseIdent {
			return "", false
		}
	case *ast.SelectorExpr:
		if pkg, ok := x.X.(*ast.Ident); !ok || pkg.Name+"."+x.Sel.Name != baseIdent {
			return "", false
		}
	default:
		return "", false
	}
	lit, ok := bin.Y.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/admin"
)

// adminTokenEnv carries the admin token to `keys`, as it does to the proxy
// (admin.token).
const adminTokenEnv = "IDEMPOTENCY_PROXY_ADMIN_TOKEN"

const keysUsage = `Usage: idempotency-proxy keys COMMAND [flags]

Commands (they call the admin API of a running proxy; see docs/operating.md):
  get HASH                 show the lease (who holds it, since when) or the
                           record under a key_hash
  delete HASH              remove it (a lease's request is then fenced)
  list [--state S] [--limit N] [--cursor C]
                           list keys: S is in_flight, completed or all
  find KEY                 the records of the raw idempotency key KEY in every
                           scope (each client's), with their scope_hash: no
                           client credential needed; it scans the whole store
  hash --key K [--source S] [--method M] [--path P] [--host H] [--header 'Name: value']...
                           the key_hash a request with key K would use; S is the
                           route's key source that found K (default its first)
  hash --body-file FILE [--method M] [--path P] [--host H] [--header 'Name: value']...
                           the key_hash of the key the route finds in that request

Flags of every command:
` + adminFlagsUsage + `
Output is JSON on stdout. Exit status: 0 success, 1 failed call (404
included; the problem is printed on stderr), 2 bad usage.
`

// keysCmd is one parsed `keys` invocation.
type keysCmd struct {
	name      string // what its messages start with: "idempotency-proxy keys"
	admin     *url.URL
	token     string
	tokenFrom string // where token came from: adminTokenEnv or "--token-file FILE"
	method    string
	path      string
	body      []byte
	onSuccess func(status int, body []byte) []byte // rewrites what is printed
	find      string                               // keys find: the raw key, paged through
}

// runKeys runs `idempotency-proxy keys ...`.
func runKeys(args, env []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, keysUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, err := parseKeys(args[0], args[1:], env)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, keysUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "idempotency-proxy keys: %v\n\n%s", err, keysUsage)
		return exitUsage
	}
	return cmd.run(stdout, stderr)
}

// headerList collects repeated --header flags.
type headerList map[string]string

func (h headerList) String() string { return "" }

func (h headerList) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want 'Name: value', got %q", v)
	}
	h[http.CanonicalHeaderKey(name)] = strings.TrimSpace(value)
	return nil
}

func parseKeys(sub string, args, env []string) (*keysCmd, error) {
	a := newAdminCommand("idempotency-proxy keys", "keys "+sub, keysUsage)
	fs := a.fs
	var state, cursor, key, source, bodyFile, method, path, host string
	limit := admin.DefaultListLimit
	headers := headerList{}
	var positional int // HASH arguments wanted
	switch sub {
	case "get", "delete", "find":
		positional = 1
	case "list":
		fs.StringVar(&state, "state", "all", "")
		fs.TextVar(&limit, "limit", admin.DefaultListLimit, "")
		fs.StringVar(&cursor, "cursor", "", "")
	case "hash":
		fs.StringVar(&key, "key", "", "")
		fs.StringVar(&source, "source", "", "")
		fs.StringVar(&bodyFile, "body-file", "", "")
		fs.StringVar(&method, "method", "POST", "")
		fs.StringVar(&path, "path", "/", "")
		fs.StringVar(&host, "host", "", "")
		fs.Var(headers, "header", "")
	default:
		return nil, fmt.Errorf("unknown command %q", sub)
	}
	args, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if len(args) != positional {
		if sub == "find" {
			return nil, errors.New("find takes one raw idempotency key")
		}
		if positional == 1 {
			return nil, fmt.Errorf("%s takes one key_hash", sub)
		}
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(args, " "))
	}

	if (sub == "get" || sub == "delete") && !admin.ValidKeyHash(args[0]) {
		return nil, fmt.Errorf("%q is not a key_hash (lowercase hex, as the proxy's logs show it): for a raw idempotency key, `idempotency-proxy keys find KEY` lists its records in every scope, and `idempotency-proxy keys hash --key KEY` computes its key_hash in one scope", args[0])
	}
	c := &keysCmd{name: a.name, method: http.MethodGet}
	if err := c.connect(*a.adminURL, *a.tokenFile, env); err != nil {
		return nil, err
	}
	switch sub {
	case "find":
		c.find = args[0]
	case "get":
		c.path = "/admin/keys/" + url.PathEscape(args[0])
	case "delete":
		c.method, c.path = http.MethodDelete, "/admin/keys/"+url.PathEscape(args[0])
		hash := args[0]
		c.onSuccess = func(int, []byte) []byte {
			b, _ := json.Marshal(map[string]any{"key_hash": hash, "deleted": true})
			return b
		}
	case "list":
		if _, err := admin.ListState(state); err != nil {
			return nil, fmt.Errorf("--state: %w", err)
		}
		q := url.Values{"state": {state}, "limit": {limit.String()}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		c.path = "/admin/keys?" + q.Encode()
	case "hash":
		if key == "" && bodyFile == "" && len(headers) == 0 {
			return nil, errors.New("--key is required (or --body-file and --header to find it in)")
		}
		in := map[string]any{"key": key, "method": method, "host": host, "path": path, "headers": headers}
		if source != "" {
			in["source"] = source
		}
		if bodyFile != "" {
			b, err := os.ReadFile(bodyFile)
			if err != nil {
				return nil, fmt.Errorf("--body-file: %w", err)
			}
			in["body"] = string(b)
		}
		c.method, c.path = http.MethodPost, "/admin/hash"
		c.body, _ = json.Marshal(in)
	}
	return c, nil
}

// connect sets where the call goes and the token it carries, from the
// --admin and --token-file flags every command of the admin API takes.
func (c *keysCmd) connect(adminURL, tokenFile string, env []string) error {
	var err error
	if c.admin, err = url.Parse(adminURL); err != nil || (c.admin.Scheme != "http" && c.admin.Scheme != "https") || c.admin.Host == "" {
		return fmt.Errorf("--admin: want http://HOST:PORT, got %q", adminURL)
	}
	if c.token, err = cliToken(tokenFile, env); err != nil {
		return err
	}
	c.tokenFrom = adminTokenEnv
	if tokenFile != "" {
		c.tokenFrom = "--token-file " + tokenFile
	}
	return nil
}

// parseInterleaved parses flags wherever they appear among the positional
// arguments (`keys get HASH --admin URL`), which flag.Parse alone does not.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, withSuggestion(err, fs)
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// cliToken reads --token-file, else the environment; "" sends no token and
// the proxy answers 401.
func cliToken(file string, env []string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, adminTokenEnv+"="); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}

func (c *keysCmd) run(stdout, stderr io.Writer) int {
	if c.find != "" {
		return c.runFind(stdout, stderr)
	}
	body, code := c.fetch(stderr)
	if code != exitOK {
		return code
	}
	var out bytes.Buffer
	if json.Indent(&out, body, "", "  ") != nil {
		out.Reset()
		out.Write(body) // not JSON: the configuration's YAML
	}
	if !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	stdout.Write(out.Bytes())
	return exitOK
}

// findPage is the most records a find asks for in one call.
const findPage = 1000

// runFind pages through GET /admin/keys?key= until the store is scanned
// and prints every record found, in one JSON object.
func (c *keysCmd) runFind(stdout, stderr io.Writer) int {
	found := []json.RawMessage{}
	cursor := ""
	for {
		q := url.Values{"key": {c.find}, "limit": {fmt.Sprint(findPage)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		c.path = "/admin/keys?" + q.Encode()
		body, code := c.fetch(stderr)
		if code != exitOK {
			return code
		}
		var page struct {
			Keys       []json.RawMessage `json:"keys"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			fmt.Fprintf(stderr, "%s: reading the answer: %v\n", c.name, err)
			return exitFailure
		}
		found = append(found, page.Keys...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	out, _ := json.MarshalIndent(map[string]any{"keys": found}, "", "  ")
	stdout.Write(append(out, '\n'))
	return exitOK
}

// fetch makes the call and returns the answer's body on success; otherwise
// it says why on stderr and returns the exit status.
func (c *keysCmd) fetch(stderr io.Writer) ([]byte, int) {
	req, err := http.NewRequest(c.method, strings.TrimSuffix(c.admin.String(), "/")+c.path, bytes.NewReader(c.body))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.name, err)
		return nil, exitUsage
	}
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.name, err)
		return nil, exitFailure
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		fmt.Fprintf(stderr, "%s: reading the answer: %v\n", c.name, err)
		return nil, exitFailure
	}
	if res.StatusCode == http.StatusUnauthorized {
		// The problem tells an HTTP client to send a bearer token; a
		// command-line user sets it another way.
		if c.token == "" {
			fmt.Fprintf(stderr, "idempotency-proxy: the admin API needs its token (401): set %s or --token-file\n", adminTokenEnv)
		} else {
			fmt.Fprintf(stderr, "idempotency-proxy: the proxy refused the admin token from %s (401): set %s or --token-file to the proxy's admin.token\n", c.tokenFrom, adminTokenEnv)
		}
		return nil, exitFailure
	}
	if res.StatusCode >= 300 {
		if len(bytes.TrimSpace(body)) == 0 {
			body = []byte(res.Status)
		}
		fmt.Fprintf(stderr, "%s\n", bytes.TrimSpace(body))
		if res.StatusCode == http.StatusNotFound && !strings.Contains(res.Header.Get("Content-Type"), "problem") {
			fmt.Fprintf(stderr, "%s: the admin API is off on this proxy: set admin.token or admin.token_file\n", c.name)
		}
		return nil, exitFailure
	}
	if c.onSuccess != nil {
		body = c.onSuccess(res.StatusCode, body)
	}
	return body, exitOK
}

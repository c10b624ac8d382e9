// Package redisstore is the idempotency store on Redis: a single node, a
// Sentinel-managed master, or a Cluster, through redis.UniversalClient.
//
// # Key layout
//
// One Redis key per idempotency key: KeyPrefix + "{" + key + "}". The braces
// make the whole idempotency key the Cluster hash tag, so any companion key
// added later lands in the same slot and scripts may touch both. The value
// starts with a one-byte kind:
//
//	'L' fingerprint(32 bytes) token(32) description
//	                                   an in-flight lease, with PX = lease
//	'R' encoded store.Record           a completed record, with PX = ttl
//
// With expired_keys: reject a record may have a tombstone beside it,
// under its Redis key followed by store.TombstoneSuffix (tombstone.go):
//
//	'T' fingerprint(32 bytes) expiry(8) with PX = ttl + expired_key_window
//
// A lease's description is store.AppendLease's encoding of the request
// that holds it and the proxy instance running it; a lease written before
// leases were described ends at its token, and reads as describing
// nothing. The token's place never moves, so the scripts find it in either.
//
// # Round trips
//
// Begin is one SET NX PX GET (Redis 7.0+): it takes the lease or returns
// what was there; while tombstones are looked for, one script that reads
// the tombstone too. Extend, Complete and Release are token-checked Lua
// scripts run with EVALSHA (EVAL once per node after a restart); a
// Complete with a tombstone writes both in its script. Inspect is one GET
// and PTTL, Delete one DEL of the key and its tombstone; List SCANs every
// master.
//
// Commands are batched: those of concurrent requests are written to Redis
// as one pipeline and their replies read in one go (batch.go). A
// completion whose record is larger than maxPipelined is sent on its own
// connection instead. docs/architecture.md ("Redis pipelining") gives the
// figures behind the batch and queue bounds.
//
// # Failures
//
// Every operation runs under Options.Timeout, counted from its start: its
// caller gets an answer or an error by then, however long its commands
// queued (batch.go). A pipelined command whose deadline passed before it
// could be sent is not sent. One whose caller's context ended first may
// still run once Redis answers again, as a command whose reply was lost
// would: it stays queued until then, and a direct one may already be
// written. A Begin run that way leaves a lease nobody holds, and its key answers "in
// flight" until the lease expires; the other operations change nothing their
// caller did not own. Any failure to get an answer
// (network errors, timeouts, LOADING, CLUSTERDOWN, READONLY from a master
// demoted by a failover) is returned wrapping store.ErrUnavailable and the
// client's error, which names the cause (connection refused, NOAUTH, DB
// index out of range) rather than only the deadline; an out-of-memory
// refusal wraps store.ErrFull. redis.Nil never leaves this package.
//
// # Out of memory
//
// Under maxmemory-policy noeviction a full Redis refuses commands that may
// allocate. Begin on a new key and Complete then fail with store.ErrFull;
// Begin on an existing key still reports it (one more GET), and Extend keeps
// working, so a caller can hold its lease while it waits for room or stores
// a smaller record.
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	// DefaultKeyPrefix namespaces the store's keys.
	DefaultKeyPrefix = "idem:"
	// DefaultTimeout bounds each store operation, from its start.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultReplicaAckTimeout bounds each wait for replicas (ReplicaAck).
	DefaultReplicaAckTimeout = 50 * time.Millisecond
)

// Options select and tune the Redis deployment. Set URL for a single node,
// Addrs with MasterName for Sentinel, or several Addrs for a Cluster.
type Options struct {
	// URL is redis://[user:password@]host:port/db or rediss:// for TLS.
	URL string `config:"url" flag:"redis-url" address:"yes"`
	// Addrs are Sentinel addresses (with MasterName) or Cluster seed nodes.
	Addrs []string `config:"addrs" address:"yes"`
	// MasterName is the master's name in Sentinel.
	MasterName string `config:"master_name"`
	// Username, Password and TLSConfig apply to Addrs deployments; a URL
	// carries its own.
	Username, Password string
	TLSConfig          *tls.Config
	// KeyPrefix is prepended to every key; empty means DefaultKeyPrefix.
	KeyPrefix string `config:"key_prefix"`
	// Timeout bounds every operation from its start, its wait in the queue
	// and dial included; 0 means DefaultTimeout.
	Timeout time.Duration `config:"timeout"`
	// PoolSize is the connection pool size (per node for a Cluster) for
	// commands sent directly; 0 means the go-redis default of 10 per CPU.
	// Batches use go-redis's pipeline pool, at most maxConcurrentBatches
	// of its connections at a time.
	PoolSize int
	// ReplicaAck is how many replicas must acknowledge a lease before its
	// request is forwarded, and a record before the proxy lets go of it
	// (Redis WAIT; replicaack.go). 0 waits for none and costs nothing.
	ReplicaAck int `config:"replica_ack"`
	// ReplicaAckTimeout bounds each wait for ReplicaAck replicas; 0 means
	// DefaultReplicaAckTimeout. It must be shorter than Timeout, which
	// bounds the write and the wait together.
	ReplicaAckTimeout time.Duration `config:"replica_ack_timeout"`
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	c       redis.UniversalClient
	batch   *batcher // c's commands, batched
	prefix  string
	timeout time.Duration

	// legacyScripts is set once Redis refused a script's flags (before 7.0).
	legacyScripts atomic.Bool
	// lastFull is when Redis last refused a write for lack of memory, in
	// Unix nanoseconds; 0 if never.
	lastFull atomic.Int64

	acks acks // replica acknowledgement (replicaack.go); off when acks.n == 0
	// tombs is set while Begin looks for tombstones (tombstone.go).
	tombs atomic.Bool

	epochs   epochs    // memory-loss markers (epoch.go)
	sentinel *sentinel // nil unless the deployment is Sentinel's
}

// New builds the client the options describe. It does not contact Redis;
// use Ping to check reachability.
func New(opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	var c redis.UniversalClient
	var sn *sentinel
	switch {
	case opts.URL != "":
		o, err := redis.ParseURL(opts.URL)
		if err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
		tuneSimple(o, opts)
		c = redis.NewClient(o)
	case len(opts.Addrs) > 0:
		u := &redis.UniversalOptions{
			Addrs:         opts.Addrs,
			MasterName:    opts.MasterName,
			Username:      opts.Username,
			Password:      opts.Password,
			TLSConfig:     opts.TLSConfig,
			IsClusterMode: opts.MasterName == "" && len(opts.Addrs) > 1,
		}
		tuneUniversal(u, opts)
		if opts.MasterName != "" {
			sn = newSentinel(opts)
			u.Dialer, u.DialTimeout = sn.dial, dialWait
		}
		c = redis.NewUniversalClient(u)
	default:
		return nil, errors.New("redis store: set a URL, or addresses for Sentinel or Cluster")
	}
	ackTimeout := opts.ReplicaAckTimeout
	if ackTimeout <= 0 {
		ackTimeout = DefaultReplicaAckTimeout
	}
	s := fromClient(c, opts.KeyPrefix, opts.Timeout, opts.ReplicaAck, ackTimeout)
	s.sentinel = sn
	return s, nil
}

// NewFromClient wraps an existing client; prefix "" means DefaultKeyPrefix,
// timeout 0 means DefaultTimeout. Close closes c.
func NewFromClient(c redis.UniversalClient, prefix string, timeout time.Duration) (*Store, error) {
	return fromClient(c, prefix, timeout, 0, 0), nil
}

func fromClient(c redis.UniversalClient, prefix string, timeout time.Duration, ackN int, ackTimeout time.Duration) *Store {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Store{c: c, prefix: prefix, timeout: timeout}
	s.acks.n, s.acks.timeout = ackN, ackTimeout
	s.batch = newBatcher(c, ackN, ackTimeout)
	return s
}

// The client must fail fast: a slow answer is as bad as none, since the
// proxy then applies its on_store_error policy. One retry absorbs a pooled
// connection the server closed meanwhile (a Cluster client also follows up
// to three redirections). Retries are safe even when the
// first attempt was executed and only its reply lost: Begin recognises its
// own token in the value a retried SET NX GET returns, Complete accepts a
// key that already holds exactly its record, and Extend and Release are
// idempotent.
const maxRetries = 1

// maxPipelined is the largest value (an encoded record) that a completion
// sends in a batch; a larger one goes directly. maxQueued bounds the
// commands accepted and not yet answered: past it a command fails at once
// with ErrUnavailable. Together they bound what the commands queued behind
// a slow Redis hold (docs/architecture.md, "Redis pipelining"). A batch
// holds at most maxBatch commands, and at most maxConcurrentBatches are in
// flight, each on a pipeline connection of its own (see batcher).
const (
	maxPipelined         = 8 << 10
	maxQueued            = 4096
	maxBatch             = 32
	maxConcurrentBatches = 4
)

// tuneSimple and tuneUniversal set the same fields on go-redis's two option
// types, which share no interface: keep them in step.
func tuneSimple(o *redis.Options, opts Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = opts.Timeout, opts.Timeout, opts.Timeout
	o.PoolTimeout = opts.Timeout
	o.ContextTimeoutEnabled = true
	o.MaxRetries = maxRetries
	// One dial per attempt: go-redis would otherwise dial up to five times
	// with backoff inside one command, and when the deadline passes in a
	// backoff the caller sees "context deadline exceeded" instead of the
	// dial's error (connection refused, no such host).
	o.DialerRetries = 1
	o.PoolSize = opts.PoolSize
	// No CLIENT SETINFO nor CLIENT MAINT_NOTIFICATIONS handshake on every
	// new connection: fewer round trips when reconnecting after a failure.
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// RESP2: the store needs no push notifications, and under RESP3 the
	// client looks for them on every reply and sends HELLO on every dial.
	o.Protocol = 2
}

func tuneUniversal(u *redis.UniversalOptions, opts Options) {
	u.DialTimeout, u.ReadTimeout, u.WriteTimeout = opts.Timeout, opts.Timeout, opts.Timeout
	u.PoolTimeout = opts.Timeout
	u.ContextTimeoutEnabled = true
	u.MaxRetries = maxRetries
	u.DialerRetries = 1
	u.PoolSize = opts.PoolSize
	u.DisableIdentity = true
	u.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	u.Protocol = 2
}

// Ping checks that Redis answers within the timeout and would take a
// write. A replica (the address names one, or a failover demoted the
// master), a master short of the replicas its min-replicas-to-write asks
// for, or one that cannot persist answers PING while it refuses every
// lease, and readiness must say so. pingScript writes nothing, but it is
// not flagged no-writes, so Redis refuses it as it refuses a write, with
// its own words (READONLY, NOREPLICAS, MISCONF); flagged allow-oom, it
// runs on a full Redis, which still replays and renews (Health names it
// full). A server that does not know script flags is only pinged.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if !s.legacyScripts.Load() {
		_, err := s.eval(ctx, pingScript, nil, nil, func(cmd redis.Cmder) error { return s.c.Process(ctx, cmd) })
		if !flagsUnknown(err) {
			return s.translate("ping", err)
		}
		s.legacyScripts.Store(true)
	}
	return s.translate("ping", s.c.Ping(ctx).Err())
}

var pingScript = newScript("#!lua flags=allow-oom\nreturn 1")

// Close closes the client. go-redis closes its connections one by one and
// may wait on each when Redis is gone: Close returns after the store's
// timeout at the latest, leaving the rest to finish in the background.
func (s *Store) Close() error {
	done := make(chan error, 1)
	go func() {
		s.batch.close() // sends what is queued first
		if s.sentinel != nil {
			s.sentinel.close()
		}
		done <- s.c.Close()
	}()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("redis close: gave up after %v", s.timeout)
	}
}

func (s *Store) redisKey(key string) string {
	return s.prefix + "{" + key + "}"
}

// translate maps a client error to the store's sentinel errors. The client's
// error stays in the chain and in the message: it names the cause.
func (s *Store) translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if isOOM(err) {
		s.lastFull.Store(time.Now().UnixNano())
		return fmt.Errorf("redis %s: %w: %w", op, store.ErrFull, err)
	}
	if s.sentinel != nil && errors.Is(err, context.DeadlineExceeded) {
		// The command waited for a connection to a master that is gone:
		// say why, rather than only that time ran out.
		if cause := s.sentinel.noMaster(); cause != nil {
			err = fmt.Errorf("%w (waiting for a new master: %v)", err, cause)
		}
	}
	return fmt.Errorf("redis %s: %w: %w", op, store.ErrUnavailable, err)
}

// isOOM reports Redis's refusal of a write for lack of memory, sent as is
// or from inside a script.
func isOOM(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "OOM ")
}

package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// FailoverMargin is what a Sentinel failover takes beyond the master's
// down-after-milliseconds: the sentinels' election and the promotion (about
// 1.3 s measured with three sentinels on loopback), and the proxy's
// reconnection to the new master once they announce it (a few
// milliseconds; see sentinel.dial). docs/redis.md, "A lease must outlive
// a failover".
const FailoverMargin = 2 * time.Second

// sentinel asks the sentinels how long they wait before failing a master
// over (leases cannot be renewed meanwhile), and follows their
// announcements of a new master.
type sentinel struct {
	master  string
	timeout time.Duration
	tls     *tls.Config
	addrs   []string // the sentinels', as configured
	clients []*redis.SentinelClient

	mu   sync.Mutex
	subs []*redis.PubSub // +switch-master on every sentinel
	// masters are the last keptMasters addresses known to be or to have
	// been the master, the latest last.
	masters []string
	// switched is closed, and replaced, when a sentinel announces a new
	// master.
	switched chan struct{}
	closed   chan struct{} // closed by close: a waiting dial gives up
	closing  sync.Once     // a store may be closed more than once
	// waiting counts the dials waiting for a new master; lastDialErr is
	// why the last dial to the master failed.
	waiting     int
	lastDialErr error
}

// dialWait is the DialTimeout of the store's Sentinel client: how long a
// dial to a master that is gone may wait in sentinel.dial for its
// successor. go-redis dials detached from the command that needs the
// connection, which gives up at its own deadline (the store's timeout).
const dialWait = time.Minute

// reresolve is how often a waiting dial asks the sentinels for the
// master, should an announcement be missed.
const reresolve = 250 * time.Millisecond

// keptMasters bounds the former masters remembered. A dial needs them only
// to tell a master that just failed from a sentinel: go-redis dials the
// address the sentinels named last, and an address that was the master
// before many failovers is neither dialled nor worth waiting for. A
// long-lived proxy whose master moves through ever new addresses (pods
// rescheduled, say) thus holds a few addresses, not all it ever saw.
const keptMasters = 8

func newSentinel(opts Options) *sentinel {
	s := &sentinel{master: opts.MasterName, timeout: opts.Timeout, tls: opts.TLSConfig, addrs: opts.Addrs,
		switched: make(chan struct{}), closed: make(chan struct{})}
	for _, addr := range opts.Addrs {
		s.clients = append(s.clients, redis.NewSentinelClient(&redis.Options{
			Addr: addr, TLSConfig: opts.TLSConfig,
			DialTimeout: opts.Timeout, ReadTimeout: opts.Timeout, WriteTimeout: opts.Timeout,
			MaxRetries: -1, DialerRetries: 1, PoolSize: 1, DisableIdentity: true, Protocol: 2,
		}))
	}
	for _, c := range s.clients {
		go s.follow(c)
	}
	return s
}

// follow subscribes to c's announcements, and notes every one of a new
// master for s.master: "<name> <old-ip> <old-port> <new-ip> <new-port>".
// Subscribing dials the sentinel and waits on it: one that accepts
// connections and never answers holds it for the store's timeout, which
// New, subscribing to one sentinel after another, spent on each. The
// subscription reconnects on its own.
func (s *sentinel) follow(c *redis.SentinelClient) {
	sub := c.Subscribe(context.Background(), "+switch-master")
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		sub.Close()
		return
	default:
	}
	s.subs = append(s.subs, sub)
	s.mu.Unlock()
	for msg := range sub.Channel() {
		f := strings.Fields(msg.Payload)
		if len(f) != 5 || f[0] != s.master {
			continue
		}
		s.mu.Lock()
		s.noteMaster(net.JoinHostPort(f[1], f[2]))
		s.noteMaster(net.JoinHostPort(f[3], f[4]))
		close(s.switched)
		s.switched = make(chan struct{})
		s.mu.Unlock()
	}
}

// dial is the Sentinel client's dialer: the master's address go-redis
// resolved (or a sentinel's), dialled within the store's timeout.
//
// go-redis's pool stops dialling after as many failed dials in a row as it
// has connections (10 for the pipeline pool the batcher uses): from then on
// every command fails at once, and a background probe dials once a second
// until a dial succeeds. A dead master trips that within milliseconds
// under load, so the store went on failing for up to a second after the
// sentinels had announced the new master (0.7–0.8 s measured). A failed
// dial to the master therefore waits here until a new master is announced
// (or, in case an announcement is missed, until the sentinels name one
// when asked every reresolve), and dials that: the probe succeeds, and the
// pool dials again, as soon as the sentinels announce the new master. A
// command that needs a connection meanwhile waits for it until its own
// deadline (translate then names the dial's error): one that arrives just
// before the announcement gets the new master instead of an error.
func (s *sentinel) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if slices.Contains(s.addrs, addr) {
		return s.dialSentinel(ctx, network, addr)
	}
	// An address not known as a master may be a sentinel too: go-redis
	// also asks those the sentinels name (SENTINEL SENTINELS, by IP where
	// the configuration may name them by host). It is dialled as one; a
	// master answers PING as well, at the cost of one round trip per
	// new connection to a master the store has not heard named.
	s.mu.Lock()
	known := slices.Contains(s.masters, addr)
	s.mu.Unlock()
	dial := s.dialSentinel
	if known {
		dial = s.dialOnce
	}
	conn, err := dial(ctx, network, addr)
	if err == nil || !s.wasMaster(ctx, addr) {
		return conn, err
	}
	s.mu.Lock()
	s.waiting++
	s.lastDialErr = err
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		switched := s.switched
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, err
		case <-s.closed:
			return nil, err
		case <-switched:
		case <-time.After(reresolve):
		}
		cur, rerr := s.masterAddr(ctx)
		if rerr != nil {
			continue
		}
		if conn, err = s.dialOnce(ctx, network, cur); err == nil {
			return conn, nil
		}
		s.mu.Lock()
		s.lastDialErr = err
		s.mu.Unlock()
	}
}

// dialSentinel dials a sentinel for go-redis (or an address that may be
// one), and returns the connection once it has answered a PING (any reply
// will do: one that wants a password still answers).
//
// go-redis finds the master by asking every sentinel at once and taking
// the first answer, but waits for every question to end: a sentinel that
// accepts connections and never answers held that wait, and the first
// command with it, for a whole read timeout (the store's), so a store
// started with such a sentinel failed its first Ping. A command waiting
// for a connection gives up as soon as its context ends, which go-redis's
// cancels once a sentinel has answered: waiting here for the sentinel's
// PING, rather than in a read on the connection, lets a live sentinel's
// answer end the wait. A dial that is given up finishes, and fails, on its
// own within twice the timeout.
func (s *sentinel) dialSentinel(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := s.dialOnce(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if err := probe(conn, s.timeout); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s did not answer PING: %w", addr, err)
	}
	return conn, nil
}

// probe sends PING on conn and reads the reply's first line within
// timeout, leaving nothing of the reply unread.
func probe(conn net.Conn, timeout time.Duration) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return err
	}
	// Byte by byte: a buffered reader could take bytes of a later reply.
	// A reply to PING is a single line (+PONG, or an error).
	var b [1]byte
	for n := 0; n < 512; n++ {
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return err
		}
		if b[0] == '\n' {
			return conn.SetDeadline(time.Time{})
		}
	}
	return errors.New("reply line too long")
}

// noMaster returns the error of the last failed dial to the master while a
// dial waits for a new one, or nil.
func (s *sentinel) noMaster() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == 0 {
		return nil
	}
	return s.lastDialErr
}

func (s *sentinel) dialOnce(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: s.timeout}
	if s.tls == nil {
		return d.DialContext(ctx, network, addr)
	}
	return (&tls.Dialer{NetDialer: d, Config: s.tls}).DialContext(ctx, network, addr)
}

// wasMaster reports whether addr is, or was, the master, asking the
// sentinels when it is not known yet (a sentinel's address never is).
func (s *sentinel) wasMaster(ctx context.Context, addr string) bool {
	s.mu.Lock()
	known := slices.Contains(s.masters, addr)
	s.mu.Unlock()
	if known {
		return true
	}
	cur, err := s.masterAddr(ctx)
	return err == nil && cur == addr
}

// noteMaster records addr as the latest master, forgetting the oldest
// beyond keptMasters. s.mu is held.
func (s *sentinel) noteMaster(addr string) {
	if i := slices.Index(s.masters, addr); i >= 0 {
		s.masters = slices.Delete(s.masters, i, i+1)
	}
	s.masters = append(s.masters, addr)
	if extra := len(s.masters) - keptMasters; extra > 0 {
		s.masters = slices.Delete(s.masters, 0, extra)
	}
}

// answer is one sentinel's reply to a question asked of them all.
type answer[T any] struct {
	i   int // the sentinel's place in Addrs
	v   T
	err error
}

// askAll asks every sentinel q at once and sends every reply on the
// channel it returns, which has room for all of them: a caller that stops
// listening (at its deadline, the store's timeout at most) leaves no
// goroutine blocked. Asked in turn, a sentinel that accepts connections
// and never answers, or drops packets, delayed those after it by a timeout
// each: two of them ahead of a live one cost a Health check its failover
// time, and a waiting dial its master.
func askAll[T any](ctx context.Context, s *sentinel, q func(context.Context, *redis.SentinelClient) (T, error)) <-chan answer[T] {
	out := make(chan answer[T], len(s.clients))
	for i, c := range s.clients {
		go func() {
			v, err := q(ctx, c)
			out <- answer[T]{i: i, v: v, err: err}
		}()
	}
	return out
}

// unanswered adds to errs the sentinels whose reply is still missing when
// ctx ends.
func (s *sentinel) unanswered(ctx context.Context, what string, errs []error, got []bool) []error {
	for i, err := range errs {
		if err == nil && !got[i] {
			errs[i] = fmt.Errorf("%s %s at %s: %w", what, s.master, s.clients[i].String(), context.Cause(ctx))
		}
	}
	return errs
}

// masterAddr asks the sentinels for the master's address and takes the
// first that names one: the sentinels agree but briefly during a failover,
// when a stale answer only means a failed dial and another question, and
// go-redis picks the master it dials the same way (sentinelFailover's
// MasterAddr).
func (s *sentinel) masterAddr(ctx context.Context) (string, error) {
	const what = "SENTINEL GET-MASTER-ADDR-BY-NAME"
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	answers := askAll(ctx, s, func(ctx context.Context, c *redis.SentinelClient) ([]string, error) {
		return c.GetMasterAddrByName(ctx, s.master).Result()
	})
	errs, got := make([]error, len(s.clients)), make([]bool, len(s.clients))
	for range s.clients {
		var a answer[[]string]
		select {
		case a = <-answers:
			got[a.i] = true
		case <-ctx.Done():
			return "", errors.Join(s.unanswered(ctx, what, errs, got)...)
		}
		err := a.err
		if err == nil && len(a.v) != 2 {
			err = fmt.Errorf("reply %q", a.v)
		}
		if err == nil {
			addr := net.JoinHostPort(a.v[0], a.v[1])
			s.mu.Lock()
			s.noteMaster(addr)
			s.mu.Unlock()
			return addr, nil
		}
		errs[a.i] = fmt.Errorf("%s %s at %s: %w", what, s.master, s.clients[a.i].String(), err)
	}
	return "", errors.Join(errs...)
}

// failoverTime is the longest time the master may go without a successor:
// the largest down-after-milliseconds any sentinel that answers (within
// the store's timeout, and ctx) has for it, plus FailoverMargin.
func (s *sentinel) failoverTime(ctx context.Context) (time.Duration, error) {
	const what = "SENTINEL MASTER"
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	answers := askAll(ctx, s, func(ctx context.Context, c *redis.SentinelClient) (map[string]string, error) {
		return c.Master(ctx, s.master).Result()
	})
	var longest time.Duration
	errs, got := make([]error, len(s.clients)), make([]bool, len(s.clients))
	for range s.clients {
		var a answer[map[string]string]
		select {
		case a = <-answers:
			got[a.i] = true
		case <-ctx.Done():
			if longest > 0 {
				return longest + FailoverMargin, nil
			}
			return 0, errors.Join(s.unanswered(ctx, what, errs, got)...)
		}
		if a.err != nil {
			errs[a.i] = fmt.Errorf("%s %s at %s: %w", what, s.master, s.clients[a.i].String(), a.err)
			continue
		}
		ms, err := strconv.ParseInt(a.v["down-after-milliseconds"], 10, 64)
		if err != nil {
			errs[a.i] = fmt.Errorf("%s %s: down-after-milliseconds %q", what, s.master, a.v["down-after-milliseconds"])
			continue
		}
		longest = max(longest, time.Duration(ms)*time.Millisecond)
	}
	if longest == 0 {
		return 0, errors.Join(errs...)
	}
	return longest + FailoverMargin, nil
}

// close closes the subscriptions and the clients all at once: closing one
// may wait on a sentinel that never answers, and one after another they
// held Close for a timeout each.
func (s *sentinel) close() {
	s.closing.Do(func() {
		close(s.closed) // a subscription made from now on closes itself
		s.mu.Lock()
		subs := s.subs
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, sub := range subs {
			wg.Go(func() { sub.Close() })
		}
		for _, c := range s.clients {
			wg.Go(func() { c.Close() })
		}
		wg.Wait()
	})
}

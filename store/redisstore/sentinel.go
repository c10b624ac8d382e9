package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	clients []*redis.SentinelClient
	subs    []*redis.PubSub // +switch-master on every sentinel

	mu sync.Mutex
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
	s := &sentinel{master: opts.MasterName, timeout: opts.Timeout, tls: opts.TLSConfig,
		switched: make(chan struct{}), closed: make(chan struct{})}
	for _, addr := range opts.Addrs {
		s.clients = append(s.clients, redis.NewSentinelClient(&redis.Options{
			Addr: addr, TLSConfig: opts.TLSConfig,
			DialTimeout: opts.Timeout, ReadTimeout: opts.Timeout, WriteTimeout: opts.Timeout,
			MaxRetries: -1, DialerRetries: 1, PoolSize: 1, DisableIdentity: true, Protocol: 2,
		}))
	}
	for _, c := range s.clients {
		// The subscription connects, and reconnects, on its own.
		sub := c.Subscribe(context.Background(), "+switch-master")
		s.subs = append(s.subs, sub)
		go s.follow(sub)
	}
	return s
}

// follow notes every announcement of a new master for s.master:
// "<name> <old-ip> <old-port> <new-ip> <new-port>".
func (s *sentinel) follow(sub *redis.PubSub) {
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
	conn, err := s.dialOnce(ctx, network, addr)
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

// masterAddr asks the sentinels, in turn, for the master's address.
func (s *sentinel) masterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, c := range s.clients {
		hp, err := c.GetMasterAddrByName(ctx, s.master).Result()
		if err == nil && len(hp) != 2 {
			err = fmt.Errorf("reply %q", hp)
		}
		if err == nil {
			addr := net.JoinHostPort(hp[0], hp[1])
			s.mu.Lock()
			s.noteMaster(addr)
			s.mu.Unlock()
			return addr, nil
		}
		errs = append(errs, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s at %s: %w", s.master, c.String(), err))
	}
	return "", errors.Join(errs...)
}

// failoverTime is the longest time the master may go without a successor:
// the largest down-after-milliseconds any sentinel that answers has for it,
// plus FailoverMargin.
func (s *sentinel) failoverTime(ctx context.Context) (time.Duration, error) {
	var longest time.Duration
	var errs []error
	for _, c := range s.clients {
		m, err := c.Master(ctx, s.master).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("SENTINEL MASTER %s at %s: %w", s.master, c.String(), err))
			continue
		}
		ms, err := strconv.ParseInt(m["down-after-milliseconds"], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("SENTINEL MASTER %s: down-after-milliseconds %q", s.master, m["down-after-milliseconds"]))
			continue
		}
		longest = max(longest, time.Duration(ms)*time.Millisecond)
	}
	if longest == 0 {
		return 0, errors.Join(errs...)
	}
	return longest + FailoverMargin, nil
}

func (s *sentinel) close() {
	s.closing.Do(func() {
		close(s.closed)
		for _, sub := range s.subs {
			sub.Close()
		}
		for _, c := range s.clients {
			c.Close()
		}
	})
}

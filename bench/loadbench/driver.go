//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The load generator is an event loop on one OS thread over non-blocking
// sockets and epoll, like wrk's. On a 2-core machine the generator shares
// the CPUs with what it measures, so whatever it spends per request is
// taken from the targets and pulls every throughput ratio towards 1. A
// goroutine per connection with net/http's response parser cost about
// 12 µs of CPU per request here, most of it the Go scheduler parking and
// waking goroutines and threads; this loop costs a fraction of that, and
// the table reports it (client CPU µs/req) so the budget stays visible.

// responseTimeout fails a request that has not been answered in full by then.
const responseTimeout = 10 * time.Second

// scratchSize is the read buffer for response bodies, shared by all
// connections of a driver: a body is counted, not kept, so a 1 MiB
// response on each of 1,024 connections costs no more memory than a small one.
const scratchSize = 256 << 10

// driver runs one measurement: closed-loop load over its connections until
// its end time.
type driver struct {
	epfd    int
	sa      syscall.SockaddrInet4
	host    string // Host header
	path    string // request target
	bodyLen int    // every response body must be this long; -1: any length
	limit   int    // no new request once this many are sent; 0: bound by time only
	issued  int    // requests sent
	conns   []*conn
	active  int // connections still sending
	end     time.Time
	lat     []time.Duration
	scratch []byte
}

// conn is one keep-alive connection with at most one request outstanding.
type conn struct {
	idx   int // in driver.conns; the epoll event carries it
	fd    int
	keys  *keySource
	out   []byte // the request being sent; out[sent:] is not written yet
	sent  int
	in    []byte // the response head received so far
	resp  response
	rest  int // body bytes still to come once the head is in; 0 otherwise
	key   string
	want  expect
	start time.Time
	n     int  // responses received
	onOut bool // EPOLLOUT is watched: the request did not fit the socket buffer
}

// newDriver connects one connection per key source to base
// ("http://127.0.0.1:N"); requests go to path.
func newDriver(base, path string, sources []*keySource) (*driver, error) {
	host, ok := strings.CutPrefix(base, "http://")
	if !ok {
		return nil, fmt.Errorf("base %q: want http://host:port", base)
	}
	ap, err := netip.ParseAddrPort(host)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("base %q: want an IPv4 address and a port", base)
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	d := &driver{
		epfd: epfd, sa: syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()},
		host: host, path: path, bodyLen: -1, scratch: make([]byte, scratchSize),
	}
	for i, ks := range sources {
		c := &conn{idx: i, fd: -1, keys: ks, out: make([]byte, 0, 512), in: make([]byte, 0, 16<<10)}
		d.conns = append(d.conns, c)
		if err := d.dial(c); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// dial connects c. A blocking connect is fine on loopback; SO_SNDTIMEO
// bounds it should the listener's backlog be full.
func (d *driver) dial(c *conn) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	tv := syscall.NsecToTimeval(int64(5 * time.Second))
	err = errors.Join(
		syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv),
		connect(fd, &d.sa),
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1),
		syscall.SetNonblock(fd, true),
		syscall.EpollCtl(d.epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(c.idx)}),
	)
	if err != nil {
		syscall.Close(fd)
		return fmt.Errorf("connecting to %s: %w", d.host, err)
	}
	c.fd, c.onOut, c.in, c.rest = fd, false, c.in[:0], 0
	return nil
}

// connect connects fd to sa. A signal (the Go runtime preempts with SIGURG)
// interrupts a connect that has a send timeout instead of restarting it;
// the connection then goes on in the background, so connect asks again until
// it is done.
func connect(fd int, sa syscall.Sockaddr) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		switch err := syscall.Connect(fd, sa); {
		case err == syscall.EISCONN:
			return nil
		case err != syscall.EINTR && err != syscall.EALREADY:
			return err
		case time.Now().After(deadline):
			return syscall.ETIMEDOUT
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (d *driver) hangUp(c *conn) {
	if c.fd >= 0 {
		syscall.Close(c.fd) // also removes it from the epoll set
		c.fd = -1
	}
}

func (d *driver) close() {
	for _, c := range d.conns {
		d.hangUp(c)
	}
	syscall.Close(d.epfd)
}

// run sends requests until end, or until ctx is done, and returns the
// latency of every request answered. The first error — a failed request, a
// response the scenario does not allow — ends the run.
func (d *driver) run(ctx context.Context, end time.Time) ([]time.Duration, error) {
	// The loop blocks in epoll_wait, not in Go's netpoller; keeping it on one
	// thread spares the scheduler any hand-off.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()

	d.end = end
	d.lat = make([]time.Duration, 0, 1<<16)
	for _, c := range d.conns {
		if err := d.send(c); err != nil {
			return d.lat, err
		}
	}
	d.active = len(d.conns)
	events := make([]syscall.EpollEvent, len(d.conns))
	lastCheck := time.Now()
	for d.active > 0 {
		if stop.Load() {
			return d.lat, ctx.Err()
		}
		n, err := waitEvents(d.epfd, events)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return d.lat, fmt.Errorf("epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			c := d.conns[ev.Fd]
			if c.fd < 0 {
				continue // finished earlier in this batch
			}
			if ev.Events&syscall.EPOLLOUT != 0 && c.sent < len(c.out) {
				if err := d.write(c); err != nil {
					return d.lat, err
				}
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				if err := d.receive(c); err != nil {
					return d.lat, err
				}
			}
		}
		if now := time.Now(); n == 0 || now.Sub(lastCheck) > time.Second {
			lastCheck = now
			for _, c := range d.conns {
				if c.fd >= 0 && now.Sub(c.start) > responseTimeout {
					return d.lat, fmt.Errorf("key %q: no complete response after %s", c.key, responseTimeout)
				}
			}
		}
	}
	return d.lat, nil
}

// send writes c's next request.
func (d *driver) send(c *conn) error {
	c.key, c.want = c.keys.next()
	c.out = appendRequest(c.out[:0], d.host, d.path, c.key)
	d.issued++
	c.sent = 0
	c.start = time.Now()
	return d.write(c)
}

// write writes what is left of c's request; when the socket buffer is
// full it waits for EPOLLOUT.
func (d *driver) write(c *conn) error {
	for c.sent < len(c.out) {
		n, err := rawWrite(c.fd, c.out[c.sent:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if c.onOut {
				return nil
			}
			c.onOut = true
			return d.watch(c, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLOUT)
		case err != nil:
			return fmt.Errorf("key %q: writing request: %w", c.key, err)
		}
		c.sent += n
	}
	if c.onOut {
		c.onOut = false
		return d.watch(c, syscall.EPOLLIN|syscall.EPOLLRDHUP)
	}
	return nil
}

func (d *driver) watch(c *conn, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(c.idx)}
	if err := syscall.EpollCtl(d.epfd, syscall.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

// receive reads what has arrived on c; once a response is complete it is
// checked and the next request sent. The head is kept until it is whole;
// body bytes past it are only counted, in the driver's scratch buffer. A
// small response usually arrives in one read, so reading stops there rather
// than going on to EAGAIN.
func (d *driver) receive(c *conn) error {
	for {
		buf := d.scratch[:min(c.rest, len(d.scratch))]
		if c.rest == 0 {
			if len(c.in) == cap(c.in) {
				c.in = append(c.in, make([]byte, cap(c.in))...)[:len(c.in)]
			}
			buf = c.in[len(c.in):cap(c.in)]
		}
		n, err := rawRead(c.fd, buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return nil
		case err != nil:
			return fmt.Errorf("key %q: reading response: %w", c.key, err)
		case n == 0:
			return fmt.Errorf("key %q: connection closed before a complete response", c.key)
		}
		if c.rest > 0 {
			if c.rest -= n; c.rest > 0 {
				continue
			}
		} else {
			c.in = c.in[:len(c.in)+n]
			resp, head, err := parseHead(c.in)
			if err != nil {
				return fmt.Errorf("key %q: %w", c.key, err)
			}
			if head == 0 {
				continue // incomplete head
			}
			if extra := len(c.in) - head - resp.length; extra > 0 {
				return fmt.Errorf("key %q: %d bytes after the response", c.key, extra)
			}
			c.resp, c.rest = resp, head+resp.length-len(c.in)
			c.in = c.in[:0]
			if c.rest > 0 {
				continue
			}
		}
		return d.done(c)
	}
}

// done records c's complete response, checks it, and sends the next
// request unless the run is over.
func (d *driver) done(c *conn) error {
	now := time.Now()
	d.lat = append(d.lat, now.Sub(c.start))
	c.n++
	resp := c.resp
	if err := check(resp, c.key, c.want); err != nil {
		return err
	}
	if d.bodyLen >= 0 && resp.length != d.bodyLen {
		return fmt.Errorf("key %q: body of %d bytes, want %d", c.key, resp.length, d.bodyLen)
	}
	if c.sent < len(c.out) {
		return fmt.Errorf("key %q: response before the whole request was sent", c.key)
	}
	if now.After(d.end) || c.n >= maxRequestsPerWorker || (d.limit > 0 && d.issued >= d.limit) {
		d.hangUp(c)
		d.active--
		return nil
	}
	if resp.close {
		d.hangUp(c)
		if err := d.dial(c); err != nil {
			return err
		}
	}
	return d.send(c)
}

// appendRequest appends the benchmark's POST to path with key (none when
// empty).
func appendRequest(b []byte, host, path, key string) []byte {
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nContent-Type: application/json\r\n"...)
	if key != "" {
		b = append(b, "Idempotency-Key: "...)
		b = append(b, key...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(requestBody)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, requestBody...)
}

// The sockets never block, so reads, writes and a poll that does not wait
// are raw system calls: the Go scheduler is not told about them, which
// spares a hand-off each. Only a poll that waits goes through it.

func rawWrite(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawRead(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// waitEvents returns the ready events: at once when some are, else after waiting
// up to 100 ms.
func waitEvents(epfd int, events []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e == 0 && n > 0 {
		return int(n), nil
	}
	return syscall.EpollWait(epfd, events, 100)
}

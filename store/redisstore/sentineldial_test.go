package redisstore

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// fakeSentinel is a sentinel that answers SENTINEL GET-MASTER-ADDR-BY-NAME
// with answer, called once per question, and relays what is published on
// +switch-master. It returns the sentinel's address.
func fakeSentinel(t *testing.T, answer func(c *server.Peer)) string {
	t.Helper()
	m := miniredis.RunT(t)
	err := m.Server().Register("SENTINEL", func(c *server.Peer, _ string, args []string) {
		if len(args) != 2 || !strings.EqualFold(args[0], "get-master-addr-by-name") {
			c.WriteError("ERR unknown sentinel subcommand")
			return
		}
		answer(c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return m.Addr()
}

// nameMaster answers a question for the master with addr.
func nameMaster(c *server.Peer, addr string) {
	host, port, _ := net.SplitHostPort(addr)
	c.WriteLen(2)
	c.WriteBulk(host)
	c.WriteBulk(port)
}

// deadAddr is a loopback address nothing listens on: a dial is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A failed dial to the master the sentinels name waits for its successor
// and connects to that one; once it has, no dial waits for a master any
// more, and a command that then runs out of time is not said to wait for
// one.
func TestDialToAFailedMasterConnectsToItsSuccessor(t *testing.T) {
	gone, next := deadAddr(t), miniredis.RunT(t).Addr()
	var asked atomic.Int64
	addr := fakeSentinel(t, func(c *server.Peer) {
		if asked.Add(1) == 1 {
			nameMaster(c, gone)
			return
		}
		nameMaster(c, next)
	})
	sn := newSentinel(Options{Addrs: []string{addr}, MasterName: "mymaster", Timeout: 5 * time.Second})
	t.Cleanup(sn.close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn, err := sn.dial(ctx, "tcp", gone)
	if err != nil {
		t.Fatalf("dial to the master the sentinels named, now gone: %v; want a connection to its successor %s", err, next)
	}
	defer conn.Close()
	if got := conn.RemoteAddr().String(); got != next {
		t.Errorf("dial to the gone master connected to %s, want its successor %s", got, next)
	}
	if cause := sn.noMaster(); cause != nil {
		t.Errorf("noMaster = %v once the dial has its master; want nil", cause)
	}
	s := &Store{sentinel: sn}
	if err := s.translate("begin", context.DeadlineExceeded); strings.Contains(err.Error(), "waiting for a new master") {
		t.Errorf("a command out of time once the master is back: %v; want no word of waiting for a master", err)
	}
}

// A failed dial to an address the sentinels do not name as the master
// (a sentinel go-redis heard of, say) fails with its own error: it neither
// waits for a master nor is answered with a connection to the master.
func TestDialToAnAddressThatIsNotTheMasterFailsWithItsOwnError(t *testing.T) {
	master := miniredis.RunT(t).Addr()
	addr := fakeSentinel(t, func(c *server.Peer) { nameMaster(c, master) })
	sn := newSentinel(Options{Addrs: []string{addr}, MasterName: "mymaster", Timeout: 5 * time.Second})
	t.Cleanup(sn.close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	other := deadAddr(t)
	conn, err := sn.dial(ctx, "tcp", other)
	if err == nil {
		conn.Close()
		t.Fatalf("dial to %s, which is not the master, connected to %s; want its own error", other, conn.RemoteAddr())
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("dial to %s = %v; want its own error, connection refused", other, err)
	}
}

// pingAnswerer is the address of a loopback server that answers the PING
// a dial sends with reply, and then holds the connection open.
func pingAnswerer(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				var ping [len("*1\r\n$4\r\nPING\r\n")]byte
				if _, err := io.ReadFull(c, ping[:]); err == nil {
					io.WriteString(c, reply)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A dial that waits for PING's answer takes a reply line of up to 512
// bytes and refuses a longer one: such an address is no Redis.
func TestDialAfterPingTakesAReplyLineOfAtMost512Bytes(t *testing.T) {
	sn := newSentinel(Options{Addrs: []string{"127.0.0.1:1"}, MasterName: "mymaster", Timeout: 5 * time.Second})
	t.Cleanup(sn.close)
	ctx := context.Background()
	for _, tc := range []struct {
		size int // with its "\r\n"
		ok   bool
	}{{512, true}, {513, false}} {
		reply := "-" + strings.Repeat("x", tc.size-3) + "\r\n"
		conn, err := sn.dialSentinel(ctx, "tcp", pingAnswerer(t, reply))
		if err == nil {
			conn.Close()
		}
		switch {
		case tc.ok && err != nil:
			t.Errorf("dial answered by a %d-byte line: %v; want a connection", tc.size, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "reply line too long")):
			t.Errorf("dial answered by a %d-byte line: %v; want reply line too long", tc.size, err)
		}
	}
}

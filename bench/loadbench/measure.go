//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuTime returns the CPU time a process has used so far. It sums the
// per-thread nanosecond counters in /proc/PID/task/*/schedstat, far finer
// than the 10 ms ticks of /proc/PID/stat, which it falls back to when
// schedstat is not available. A Go process keeps its threads, so no
// time is lost with exited threads.
func cpuTime(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err == nil {
		var total time.Duration
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // the thread exited between listing and reading
				}
				ok = false
				break
			}
			ns, err := parseSchedstat(string(b))
			if err != nil {
				ok = false
				break
			}
			total += ns
		}
		if ok {
			return total, nil
		}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStat(string(b))
}

// parseSchedstat reads the first field of /proc/…/schedstat: nanoseconds on CPU.
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, errors.New("empty schedstat")
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// parseStat reads utime+stime from /proc/PID/stat. The command name in
// parentheses may contain spaces, so fields are counted after its ')'.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	// After ')': state is field 3 of proc(5); utime and stime are 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// monitor counts the commands clients send to a Redis server, through
// MONITOR. Redis's own counters (INFO commandstats, total_commands_processed)
// also count every command a Lua script runs, so they overstate round trips
// when the store uses scripts; MONITOR marks those with "lua" and they are
// skipped here. MONITOR slows Redis down, so it runs only in a calibration
// pass of its own, never while throughput is measured.
type monitor struct {
	conn net.Conn
	r    *bufio.Reader
	addr string
}

func startMonitor(addr string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	m := &monitor{conn: conn, r: bufio.NewReader(conn), addr: addr}
	if _, err := io.WriteString(conn, "MONITOR\r\n"); err != nil {
		conn.Close()
		return nil, err
	}
	if line, err := m.line(); err != nil || line != "+OK" {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	return m, nil
}

func (m *monitor) close() { m.conn.Close() }

func (m *monitor) line() (string, error) {
	_ = m.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := m.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// count returns how many client commands Redis received since the last
// call. It sends a marker command on a separate connection and reads the
// stream up to it, so every command sent before count was called is seen.
func (m *monitor) count() (int, error) {
	marker := "loadbench-marker-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := redisCommand(m.addr, "ECHO "+marker); err != nil {
		return 0, err
	}
	n := 0
	for range 10_000_000 {
		line, err := m.line()
		if err != nil {
			return 0, fmt.Errorf("reading MONITOR: %w", err)
		}
		switch {
		case strings.Contains(line, `"`+marker+`"`):
			return n, nil
		case isClientCommand(line):
			n++
		}
	}
	return 0, errors.New("MONITOR: marker never seen")
}

// isClientCommand tells a command a client sent from one a script ran, in
// MONITOR's format: +1718000000.123456 [0 127.0.0.1:50000] "SET" … versus
// +1718000000.123456 [0 lua] "SET" …. The handshake of a new connection
// (HELLO, AUTH, SELECT, CLIENT SETINFO) is a cost per connection, not per
// request, and is not counted either.
func isClientCommand(line string) bool {
	open := strings.IndexByte(line, '[')
	end := strings.IndexByte(line, ']')
	if !strings.HasPrefix(line, "+") || open < 0 || end < open || strings.HasSuffix(line[open:end], " lua") {
		return false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(line[end+1:], " "), " ")
	switch strings.ToLower(strings.Trim(name, `"`)) {
	case "hello", "auth", "select", "client":
		return false
	}
	return true
}

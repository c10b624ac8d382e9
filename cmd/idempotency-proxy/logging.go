package main

import (
	"io"
	stdlog "log"
	"log/slog"
)

// newLogger returns the process logger: JSON lines on w, at level. Every
// other writer of log lines in the process is routed through it too, so that
// stderr stays one JSON object a line for log collectors:
//
//   - the standard log package, which net/http's Transport writes to
//     directly ("Unsolicited response received on idle HTTP channel",
//     when an upstream answers on a connection with no request), logged
//     at warn level;
//   - the http.Servers' ErrorLog (TLS handshake errors, panics in
//     handlers), through serverErrorLog.
//
// go-redis has a logger of its own, routed in wire.go.
//
// w is the immediate side of the process's log buffer (internal/logbuf):
// these lines are written at once, after the access lines buffered before
// them; the access lines alone wait for a full buffer or logbuf.Delay, so
// that a request does not pay a write(2) for its line.
func newLogger(w io.Writer, level *slog.LevelVar) *slog.Logger {
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log) // also sends the log package's output to log's handler
	slog.SetLogLoggerLevel(slog.LevelWarn)
	return log
}

// serverErrorLog is the ErrorLog of the proxy and admin http.Servers: what
// net/http reports there (accept errors, TLS handshakes, a handler's panic)
// is worth a warning, not an error of the process.
func serverErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelWarn)
}

package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/lograte"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

var _ store.Options = Options{}

// Defaults returns o with the default key prefix and timeout where unset.
func (o Options) Defaults() store.Options {
	if o.Addrs == nil {
		o.Addrs = []string{}
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ReplicaAckTimeout == 0 {
		o.ReplicaAckTimeout = DefaultReplicaAckTimeout
	}
	return o
}

// Check validates the deployment the options describe without contacting
// it. A URL's parse error is not quoted: it would echo the password.
func (o Options) Check(section string) []store.Problem {
	var out []store.Problem
	add := func(key, format string, args ...any) {
		out = append(out, store.Problem{Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		switch {
		case err != nil:
			add("url", "invalid URL")
		case u.Scheme != "redis" && u.Scheme != "rediss":
			add("url", "scheme must be redis or rediss, not %q", u.Scheme)
		case u.Host == "":
			add("url", "missing host")
		}
		if len(o.Addrs) > 0 {
			add("addrs", "set either %s.url or %s.addrs, not both", section, section)
		}
	}
	for i, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add(fmt.Sprintf("addrs[%d]", i), "invalid address %q (want host:port)", a)
		}
	}
	if o.MasterName != "" && len(o.Addrs) == 0 {
		add("master_name", "needs %s.addrs (the Sentinel addresses)", section)
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		// Braces would defeat the hash tag that keeps one key's entries in
		// one Cluster slot.
		add("key_prefix", "must not contain { or }")
	}
	if o.Timeout <= 0 {
		add("timeout", "must be > 0, not %s", o.Timeout)
	}
	if o.ReplicaAck < 0 {
		add("replica_ack", "must be >= 0 (0 waits for no replica), not %d", o.ReplicaAck)
	}
	switch {
	case o.ReplicaAckTimeout <= 0:
		add("replica_ack_timeout", "must be > 0, not %s", o.ReplicaAckTimeout)
	case o.ReplicaAck > 0 && o.Timeout > 0 && o.ReplicaAckTimeout >= o.Timeout:
		// The write and the wait share one operation's timeout: a wait
		// as long would always end as a timeout instead of a count.
		add("replica_ack_timeout", "must be shorter than %s.timeout (%s), not %s", section, o.Timeout, o.ReplicaAckTimeout)
	}
	return out
}

// Open builds the client (New) and sends go-redis's own log lines to log.
func (o Options) Open(log *slog.Logger) (store.Store, error) {
	redis.SetLogger(newClientLogger(log))
	return New(o)
}

// Describe names the deployment, the URL with its password masked.
func (o Options) Describe() string {
	switch {
	case o.URL != "":
		if u, err := url.Parse(o.URL); err == nil {
			return u.Redacted()
		}
		return "redis"
	case o.MasterName != "":
		return "sentinel " + o.MasterName + " via " + strings.Join(o.Addrs, ",")
	default:
		return "cluster " + strings.Join(o.Addrs, ",")
	}
}

// clientLogger sends go-redis's log lines (reconnect attempts, pool
// errors) to the JSON log instead of a plain line on stderr, one a
// lograte.Period: while Redis is down they come on every command.
type clientLogger struct {
	log   *slog.Logger
	limit *lograte.Limiter
	now   func() time.Time
}

func newClientLogger(log *slog.Logger) clientLogger {
	return clientLogger{log: log, limit: lograte.New(lograte.Period), now: time.Now}
}

func (l clientLogger) Printf(ctx context.Context, format string, v ...any) {
	if ok, n := l.limit.Allow(l.now()); ok {
		l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...), "suppressed", n)
	}
}

package config

import (
	"log/slog"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// LogLevel is log_level, the minimum level of the logs: "debug", "info",
// "warn" or "error", in any case. slog reads more ("warn+2"); the
// configuration has these four words.
type LogLevel uint8

// The log levels, in the order of their words.
const (
	LogDebug LogLevel = iota
	LogInfo
	LogWarn
	LogError
)

var (
	logLevelWords = enum.Words{"debug", "info", "warn", "error"}
	slogLevels    = []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}
)

// Level is the slog level of l; info for a value without a word.
func (l LogLevel) Level() slog.Level {
	if int(l) < len(slogLevels) {
		return slogLevels[l]
	}
	return slog.LevelInfo
}

func (l LogLevel) String() string               { return logLevelWords.Name(int(l)) }
func (l LogLevel) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads the level's word in any case, as every word key's.
func (l *LogLevel) UnmarshalText(b []byte) error {
	i, err := logLevelWords.Parse(string(b))
	if err != nil {
		return err
	}
	*l = LogLevel(i)
	return nil
}

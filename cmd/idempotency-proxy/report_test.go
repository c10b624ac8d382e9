package main

import (
	"bytes"
	"strings"
	"testing"
)

// A report asked badly says what is wrong with exit status 2, before any
// call is made.
func TestReportRefusesBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "--window", "-1h"}, "--window: want a positive duration"},
		{[]string{"report", "--window", "30s"}, "--window: counts are kept per minute, so the smallest window is 1m0s, got 30s"},
		{[]string{"report", "--window", "1day"}, "invalid value"},
		{[]string{"report", "now"}, "unexpected arguments"},
		{[]string{"report", "--admin", "127.0.0.1:9090"}, "--admin: want http://HOST:PORT"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, nil, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), exitUsage, tc.want)
		}
	}
}

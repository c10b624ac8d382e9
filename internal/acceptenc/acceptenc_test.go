package acceptenc

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

func TestAccepts(t *testing.T) {
	tests := []struct {
		fields []string
		coding string
		want   bool
	}{
		{nil, "gzip", false},
		{nil, "identity", true},
		{[]string{""}, "gzip", false},
		{[]string{""}, "identity", true},
		{[]string{"gzip"}, "gzip", true},
		{[]string{"GZIP"}, "gzip", true},
		{[]string{"x-gzip"}, "gzip", true},
		{[]string{"gzip"}, "x-gzip", true},
		{[]string{"gzip, deflate, br"}, "deflate", true},
		{[]string{"br"}, "gzip", false},
		{[]string{"br", "gzip"}, "gzip", true}, // two field lines are one list
		{[]string{"gzip;q=0"}, "gzip", false},
		{[]string{"gzip; q=0.000"}, "gzip", false},
		{[]string{"gzip;Q=0.001"}, "gzip", true},
		{[]string{"gzip;q=1.000"}, "gzip", true},
		{[]string{"gzip;q=0.5;level=1"}, "gzip", true},
		{[]string{"gzip, gzip;q=0"}, "gzip", false}, // said both ways: refused
		{[]string{"x-gzip;q=0, gzip"}, "gzip", false},
		{[]string{"*"}, "gzip", true},
		{[]string{"*;q=0"}, "gzip", false},
		{[]string{"*, gzip;q=0"}, "gzip", false},
		{[]string{"*;q=0, gzip"}, "gzip", true},
		{[]string{"identity"}, "gzip", false},
		{[]string{"identity;q=0"}, "identity", false},
		{[]string{"*;q=0"}, "identity", false},
		{[]string{"*;q=0, identity"}, "identity", true},
		{[]string{"gzip"}, "identity", true},
		{[]string{"gzip;q=2"}, "gzip", false},      // a weight that cannot be read
		{[]string{"gzip;q=1.5"}, "gzip", false},    // leaves its member out
		{[]string{"gzip;q=0.0001"}, "gzip", false}, // four digits
		{[]string{"gzip;q=abc, *"}, "gzip", true},  // and "*" still answers
		{[]string{" , ,gzip ,"}, "gzip", true},     // empty members
		{[]string{"gzipx, xgzip"}, "gzip", false},  // tokens, not substrings
		{[]string{"deflate;q=0.9, gzip;q=0"}, "deflate", true},
	}
	for _, tc := range tests {
		if got := Accepts(tc.fields, tc.coding); got != tc.want {
			t.Errorf("Accepts(%q, %q) = %v, want %v", tc.fields, tc.coding, got, tc.want)
		}
	}
}

func TestAcceptsDoesNotAllocate(t *testing.T) {
	fields := []string{"br;q=1.0, gzip;q=0.8, *;q=0.1", "identity"}
	if n := testing.AllocsPerRun(100, func() { Accepts(fields, "deflate") }); n != 0 {
		t.Errorf("Accepts allocates %.0f times, want 0", n)
	}
}

// FuzzAccepts checks Accepts against a reading written the long way: the
// field split into a list of members, each member's weight parsed as a
// number.
func FuzzAccepts(f *testing.F) {
	for _, s := range []string{
		"", "gzip", "gzip;q=0", "*;q=0, gzip", "x-gzip;q=0.5", "br, deflate;q=0.001",
		"identity;q=0", "gzip;q=1.5", "gzip; q = 0.0 ; a=b", ",,;q=1", "*, gzip;q=0",
	} {
		f.Add(s, "gzip")
		f.Add(s, "identity")
	}
	f.Fuzz(func(t *testing.T, field, coding string) {
		if !httpguts.ValidHeaderFieldName(coding) || coding == "*" {
			return // a coding is a token (RFC 9110, section 8.4.1)
		}
		fields := strings.Split(field, "\n")
		got := Accepts(fields, coding)
		if want := oracle(fields, coding); got != want {
			t.Fatalf("Accepts(%q, %q) = %v, the long way %v", fields, coding, got, want)
		}
		if isGzip(coding) && got != Accepts(fields, "x-gzip") {
			t.Fatalf("Accepts(%q) reads gzip and x-gzip differently", fields)
		}
		if !strings.EqualFold(coding, "identity") && Accepts(append(fields, coding+";q=0"), coding) {
			t.Fatalf("Accepts(%q, %q) despite q=0", fields, coding)
		}
	})
}

// oracle is Accepts the long way.
func oracle(fields []string, coding string) bool {
	weights := map[string][]float64{}
	for _, f := range fields {
		for _, m := range strings.Split(f, ",") {
			parts := strings.Split(m, ";")
			name := strings.ToLower(strings.TrimSpace(parts[0]))
			if name == "" {
				continue
			}
			if name == "x-gzip" {
				name = "gzip"
			}
			q, ok := 1.0, true
			for _, p := range parts[1:] {
				k, v, _ := strings.Cut(p, "=")
				if strings.ToLower(strings.TrimSpace(k)) == "q" {
					q, ok = oracleQ(strings.TrimSpace(v))
				}
			}
			if ok {
				weights[name] = append(weights[name], q)
			}
		}
	}
	c := strings.ToLower(coding)
	if c == "x-gzip" {
		c = "gzip"
	}
	decide := func(qs []float64) bool {
		for _, q := range qs {
			if q == 0 {
				return false
			}
		}
		return true
	}
	if qs, ok := weights[c]; ok && c != "*" {
		return decide(qs)
	}
	if qs, ok := weights["*"]; ok {
		return decide(qs)
	}
	return c == "identity"
}

func oracleQ(v string) (float64, bool) {
	if len(v) > 5 || v == "" || v[0] != '0' && v[0] != '1' || len(v) > 1 && v[1] != '.' {
		return 0, false
	}
	for _, r := range v {
		if r != '.' && (r < '0' || r > '9') {
			return 0, false
		}
	}
	q, err := strconv.ParseFloat(v, 64)
	if err != nil || q > 1 {
		return 0, false
	}
	return q, true
}

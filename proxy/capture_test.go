package proxy

import (
	"slices"
	"testing"
)

func TestRecordedContentLengthIsTheLengthAsAReplaySendsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		sent []string // the upstream's Content-Length field
		n    int64
		want string
		kept bool // the upstream's field itself is recorded
	}{
		{"as sent", []string{"200"}, 200, "200", true},
		{"zero", []string{"0"}, 0, "0", true},
		{"leading zero", []string{"0200"}, 200, "200", false},
		{"sign", []string{"+200"}, 200, "200", false},
		{"another length", []string{"199"}, 200, "200", false},
		{"none sent", nil, 200, "200", false},
		{"two sent", []string{"200", "200"}, 200, "200", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capture{sentLength: slices.Clone(tc.sent)}
			got := c.lengthField(tc.n)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("Content-Length %q, want [%s]", got, tc.want)
			}
			if kept := len(c.sentLength) > 0 && &got[0] == &c.sentLength[0]; kept != tc.kept {
				t.Errorf("the upstream's field kept: %v, want %v", kept, tc.kept)
			}
		})
	}
}

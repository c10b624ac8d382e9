// Package enum reads and writes the words of the configuration's small
// enumerations (concurrent: reject|wait, when_full: reject|evict_oldest,
// …), so that every one is parsed the same way — in any case: "WAIT" and
// "Wait" are wait, as "INFO" is the log level info, since the environment
// is where operators write upper case — and refuses a word with the same
// message, naming the words as they are written: "must be one of reject,
// wait; got "queue" (did you mean reject?)". The configuration puts the
// key path and the value's origin in front of it.
package enum

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Words are an enumeration's words, in the order of its values: the word
// of value i is Words[i].
type Words []string

// Parse returns the value of word s, in any case, or an *Error.
func (w Words) Parse(s string) (int, error) {
	i := slices.IndexFunc(w, func(word string) bool { return foldsTo(s, word) })
	if i < 0 {
		return 0, &Error{Given: s, Words: w}
	}
	return i, nil
}

// foldsTo reports whether s is word in another case of its ASCII letters.
// Unicode's folding would also take the Kelvin sign for k and the long s
// for s ("fail_clo\u017fed"), a word no one writes by hand.
func foldsTo(s, word string) bool {
	if len(s) != len(word) {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		d := word[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// Name returns the word of value i, or "invalid(i)" for a value that has
// none (one built in code).
func (w Words) Name(i int) string {
	if i < 0 || i >= len(w) {
		return "invalid(" + strconv.Itoa(i) + ")"
	}
	return w[i]
}

// Check reports a value built in code that has no word.
func (w Words) Check(i int) error {
	if i < 0 || i >= len(w) {
		return &Error{Given: w.Name(i), Words: w}
	}
	return nil
}

// Error is a word that is none of an enumeration's words.
type Error struct {
	Given string
	Words []string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("must be one of %s; got %q", strings.Join(e.Words, ", "), e.Given)
	if c := Closest(e.Given, e.Words); c != "" {
		msg += " (did you mean " + c + "?)"
	}
	return msg
}

// Closest returns the known word closest to s, or "" when none is close:
// the Nearest, or else the first known word that starts with s ("evict" →
// evict_oldest), or that s starts with ("warning" → warn).
func Closest(s string, known []string) string {
	if s == "" {
		return ""
	}
	if n := Nearest(s, known); n != "" {
		return n
	}
	for _, k := range known {
		if strings.HasPrefix(k, s) {
			return k
		}
	}
	for _, k := range known {
		if strings.HasPrefix(strings.ToLower(s), k) {
			return k
		}
	}
	return ""
}

// Nearest returns the known name that s is a typo of, ignoring case, or
// "": up to one edit in four characters, and at least one; a swap of two
// neighbours is one edit. The configuration also suggests keys with it.
func Nearest(s string, known []string) string {
	lower := strings.ToLower(s)
	best, bestDist := "", len(s)/4+2
	for _, k := range known {
		if d := distance(lower, strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b: edits,
// with a swap of two neighbours counted as one ("tiemout", "timeout").
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range cur {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

package jsonread

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// AppendMembers reads the top-level members of one name as PHP's
// json_decode and JavaScript's JSON.parse match names — exactly, escapes
// decoded — every one of them in order, whatever nests before them.
func TestAppendMembersReadsEveryTopLevelMemberOfTheName(t *testing.T) {
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	for _, c := range []struct {
		name, doc string
		want      []string
	}{
		{"one", `{"a":1,"_method":"DELETE"}`, []string{`"DELETE"`}},
		{"repeated, in order", `{"_method":"PATCH", "x":{}, "_method" : "DELETE" }`, []string{`"PATCH"`, `"DELETE"`}},
		{"escaped name", `{"\u005fmetho\u0064":"DELETE"}`, []string{`"DELETE"`}},
		{"any value", `{"_method":["DELETE"],"_method":null}`, []string{`["DELETE"]`, `null`}},
		{"after a value deeper than MaxDepth", `{"a":` + deep + `,"_method":"DELETE"}`, []string{`"DELETE"`}},
		{"brackets in strings", `{"a":["]}",{"b":"{["}],"_method":"DELETE"}`, []string{`"DELETE"`}},
		{"byte order mark", "\xef\xbb\xbf{\"_method\":\"DELETE\"}", []string{`"DELETE"`}},
		{"another case", `{"_METHOD":"DELETE"}`, nil},
		{"nested", `{"a":{"_method":"DELETE"}}`, nil},
		{"in an array", `[{"_method":"DELETE"}]`, nil},
		{"a string", `"_method"`, nil},
		{"cut inside the value", `{"_method":"DELETE","x":1,"_method":"PA`, []string{`"DELETE"`}},
		{"cut before the comma", `{"_method":"DELETE"`, nil},
		{"cut inside a nested value", `{"_method":"PATCH","a":[[1,`, []string{`"PATCH"`}},
		{"not JSON after a member", `{"_method":"PATCH",x,"_method":"DELETE"}`, []string{`"PATCH"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, v := range AppendMembers(nil, []byte(c.doc), "_method") {
				got = append(got, string(v))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%q: %q, want %q", c.doc, got, c.want)
			}
		})
	}
}

// Reading a body whose member is not there allocates nothing.
func TestAppendMembersAllocatesNothing(t *testing.T) {
	doc := []byte(`{"amount":2000,"payment_method":"pm_1","\u00e9":[{"a":"b"}]}`)
	var buf [2][]byte
	if n := testing.AllocsPerRun(100, func() { AppendMembers(buf[:0], doc, "_method") }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// FuzzAppendMembers compares AppendMembers with encoding/json's reading of
// the same body: on one JSON text it returns exactly the values of the
// top-level members named name, in order; on any prefix of it, the values
// of the members the prefix holds whole; and it never panics.
func FuzzAppendMembers(f *testing.F) {
	f.Add([]byte(`{"_method":"DELETE"}`), "_method", uint16(0))
	f.Add([]byte(`{"_method":"PATCH","a":[{"_method":1}],"_method":"DELETE"}`), "_method", uint16(30))
	f.Add([]byte(`{"\u005fmethod":"x","k":{"\"}":"]"}}`), "_method", uint16(9))
	f.Add([]byte(`{"a":1,"a":2}`), "a", uint16(5))
	f.Fuzz(func(t *testing.T, doc []byte, name string, cut uint16) {
		got := AppendMembers(nil, doc, name)
		text, _ := trimBOM(doc)
		tree, ok := readTree(t, text)
		o, isObject := tree.(object)
		if !ok || !utf8.Valid(text) { // encoding/json reads bad UTF-8 as U+FFFD
			return
		}
		var want []any
		for _, m := range o {
			if m.name == name {
				want = append(want, m.value)
			}
		}
		if !isObject {
			want = nil
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %q, encoding/json reads %v", doc, got, want)
		}
		for i, v := range got {
			if read, _ := readTree(t, v); !reflect.DeepEqual(read, want[i]) {
				t.Fatalf("%q: %q, encoding/json reads %v", doc, got, want)
			}
		}
		prefix := AppendMembers(nil, doc[:int(cut)%(len(doc)+1)], name)
		if len(prefix) > len(got) {
			t.Fatalf("a prefix of %q gives %q, the whole %q", doc, prefix, got)
		}
		for i, v := range prefix {
			if string(v) != string(got[i]) {
				t.Fatalf("a prefix of %q gives %q, the whole %q", doc, prefix, got)
			}
		}
	})
}

package jsonread

// AppendMembers appends to dst the values of the members of the object
// doc is whose names are name, exactly — case-sensitively, as PHP's
// json_decode, JavaScript's JSON.parse and Python's json read names — in
// the order they appear, each a slice of doc. Nested objects are not
// looked into, and a doc that is not an object has no members.
//
// It reads what a reader that keeps every member would read, and never
// less: a member counts once the ',' or '}' after its value is read, so a
// prefix of a body gives the members it holds whole, and reading stops at
// the first byte that is not the object's grammar. The values between are
// skipped to their end at any depth (PHP reads 512 levels, past
// MaxDepth) without being checked, so doc is not Validated: a body that is
// not JSON may give a member a strict reader would refuse to read.
func AppendMembers(dst [][]byte, doc []byte, name string) [][]byte {
	doc, _ = trimBOM(doc)
	i := skipWS(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return dst
	}
	if i = skipWS(doc, i+1); i < len(doc) && doc[i] == '}' {
		return dst
	}
	for i < len(doc) && doc[i] == '"' {
		start := i
		if i = scanString(doc, i); i < 0 {
			return dst
		}
		// An escape stands for at most one byte in six: a longer raw name
		// cannot be name.
		raw := doc[start+1 : i-1]
		match := len(raw) <= 6*len(name) && tokenMatchesKey(raw, name)
		if i = skipWS(doc, i); i >= len(doc) || doc[i] != ':' {
			return dst
		}
		v := skipWS(doc, i+1)
		if i = skipValue(doc, v); i < 0 {
			return dst
		}
		end := i
		if i = skipWS(doc, i); i >= len(doc) || doc[i] != ',' && doc[i] != '}' {
			return dst
		}
		if match {
			dst = append(dst, doc[v:end])
		}
		if doc[i] == '}' {
			return dst
		}
		i = skipWS(doc, i+1)
	}
	return dst
}

// skipValue returns the offset after the value at b[i], or -1. An array
// or an object is read to its closing bracket, at any depth and without
// recursion: its strings are scanned, its other bytes only counted as
// brackets.
func skipValue(b []byte, i int) int {
	if i >= len(b) || b[i] != '{' && b[i] != '[' {
		return scanScalar(b, i)
	}
	open := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			if i = scanString(b, i); i < 0 {
				return -1
			}
			continue
		case '{', '[':
			open++
		case '}', ']':
			if open--; open == 0 {
				return i + 1
			}
		}
		i++
	}
	return -1
}

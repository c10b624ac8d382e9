// Package jsonread reads JSON request bodies in place, for the proxy's key
// sources and fingerprints: Find returns the value an RFC 6901 pointer names,
// AppendCanonical writes the canonical form a fingerprint hashes (members
// sorted, whitespace dropped, chosen values left out), Valid says whether a
// body is one JSON text. Nothing is copied or kept beyond what a call
// returns, and every function is bounded by MaxDepth.
package jsonread

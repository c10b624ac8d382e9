// Package grpcwire reads and writes what the proxy needs of gRPC over
// HTTP/2 (github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) without
// linking a gRPC implementation: which requests are gRPC, the
// length-prefixed messages of a body, whether a call is unary, and the
// status of a call — read from a response's trailers, or written as the
// proxy's own answer.
package grpcwire

import (
	"strconv"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// Code is a gRPC status code (google.golang.org/grpc/codes).
type Code uint32

// The codes the proxy answers or reads by name.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

// codeWords are the codes' names as gRPC writes them, in code order: the
// words of release_grpc_statuses.
var codeWords = enum.Words{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// String is the code's name (UNAVAILABLE), or its number when it has none.
func (c Code) String() string {
	if int(c) < len(codeWords) {
		return codeWords[c]
	}
	return strconv.FormatUint(uint64(c), 10)
}

func (c Code) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a code's name, in any case.
func (c *Code) UnmarshalText(b []byte) error {
	i, err := codeWords.Parse(string(b))
	if err != nil {
		return err
	}
	*c = Code(i)
	return nil
}

// Value is the code as the grpc-status field carries it.
func (c Code) Value() string { return strconv.FormatUint(uint64(c), 10) }

// ParseStatus reads a grpc-status field's value; ok is false when it is not
// a decimal code.
func ParseStatus(v string) (Code, bool) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return Code(n), true
}

package proxy

import "net/http"

// Protocol is what a request came as, for metrics and the access line: a
// small enumeration, never a value from the request.
type Protocol uint8

const (
	ProtocolHTTP1 Protocol = iota // HTTP/1.x
	ProtocolHTTP2                 // HTTP/2 (h2c), not gRPC
	ProtocolGRPC                  // gRPC, over HTTP/2
	numProtocols
)

var protocolNames = [numProtocols]string{"http1", "http2", "grpc"}

func (p Protocol) String() string { return protocolNames[p] }

// protocolOf is the protocol r came as.
func protocolOf(r *http.Request) Protocol {
	switch {
	case r.ProtoMajor != 2:
		return ProtocolHTTP1
	case isGRPC(r):
		return ProtocolGRPC
	}
	return ProtocolHTTP2
}

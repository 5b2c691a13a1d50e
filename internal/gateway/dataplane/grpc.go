package dataplane

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// gRPC status codes the data plane answers with itself
// (https://grpc.github.io/grpc/core/md_doc_statuscodes.html).
const (
	grpcDeadlineExceeded = 4
	grpcUnimplemented    = 12
	grpcUnavailable      = 14
)

// listenerProtocols are what HTTP and HTTPS listeners speak: HTTP/1.1,
// HTTP/2 over TLS (ALPN h2) and HTTP/2 in cleartext with prior knowledge,
// as gRPC clients connect, side by side on one port.
func listenerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// isGRPC says whether a request is a gRPC call.
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && (ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;"))
}

// grpcError answers a call with a status and no message: a gRPC
// "trailers-only" response, the status in the headers.
func grpcError(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(code))
	h.Set("Grpc-Message", url.PathEscape(msg))
	w.WriteHeader(http.StatusOK)
}

// backendTransport reaches each backend in the protocol it speaks:
// HTTP/1.1 (upgraded to WebSocket where asked), or HTTP/2 in cleartext
// with prior knowledge.
type backendTransport struct {
	http1, h2c *http.Transport
	// fast takes the requests without a body to plain HTTP/1.1 backends
	// (upstream.go).
	fast *fastUpstream
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// tls are the transports of TLS backends by their settings' key
	// (backendtls.go).
	tls sync.Map
}

func newBackendTransport(dial func(ctx context.Context, network, address string) (net.Conn, error)) *backendTransport {
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	return &backendTransport{
		dial: dial,
		fast: newFastUpstream(dial),
		// The backend sees the client's Accept-Encoding as it was sent,
		// on either path: the Transport would otherwise ask for gzip and
		// unpack it on the client's behalf, which the fast path does not.
		http1: &http.Transport{
			DialContext:         dial,
			MaxIdleConnsPerHost: upstreamIdlePerHost,
			IdleConnTimeout:     upstreamIdleTimeout,
			DisableCompression:  true,
		},
		h2c: &http.Transport{
			DialContext:     dial,
			IdleConnTimeout: 90 * time.Second,
			Protocols:       &h2c,
		},
	}
}

func (t *backendTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tg := targetOf(r.Context())
	if tg.tls != nil {
		return t.tlsTransport(tg.tls).RoundTrip(r)
	}
	if tg.h2c {
		return t.h2c.RoundTrip(r)
	}
	if takesFastPath(r) {
		return t.fast.RoundTrip(r)
	}
	return t.http1.RoundTrip(r)
}

package local

import (
	"encoding/binary"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// AnnotationProxyProtocol asks the proxy data plane to tell each backend
// whose TCP connection it relays: "v2" sends a PROXY protocol version 2
// header (HAProxy's specification) naming the client's address and port
// and the VIP's before the client's first byte, as a cloud's load
// balancer with PROXY protocol enabled does. The backend must then expect
// one on every connection (a Gateway with proxyProtocol: "true" does).
// UDP ports are relayed as they are.
const AnnotationProxyProtocol = "local.outrigger.dev/proxy-protocol"

// proxyProtocolOf reads the annotation: absent is off; "v2" is the one
// version sent. Only the proxy data plane can send it (with dataPlane:
// nodes, kube-proxy relays the packets and adds nothing), so there it is
// refused rather than leaving every connection to a backend that waits
// for a header that never comes.
func proxyProtocolOf(svc *corev1.Service, proxyDataPlane bool) (bool, error) {
	v, ok := svc.Annotations[AnnotationProxyProtocol]
	if !ok {
		return false, nil
	}
	if v != "v2" {
		return false, provider.Reasonf(provider.ReasonInvalidAnnotation, "annotation %s=%q: want \"v2\" (or no annotation)", AnnotationProxyProtocol, v)
	}
	if !proxyDataPlane {
		return false, provider.Reasonf(provider.ReasonInvalidAnnotation, "annotation %s: only dataPlane: proxy sends PROXY protocol headers", AnnotationProxyProtocol)
	}
	return true, nil
}

// v2Signature starts every PROXY protocol version 2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// proxyV2Header is the header for a TCP connection from client to vip:
// command PROXY, transport STREAM, family INET when both addresses are
// IPv4 (an IPv4-mapped IPv6 address counts as IPv4), INET6 otherwise,
// and no TLVs.
func proxyV2Header(client, vip netip.AddrPort) []byte {
	src, dst := client.Addr().Unmap(), vip.Addr().Unmap()
	b := make([]byte, 0, 16+36)
	b = append(b, v2Signature...)
	b = append(b, 0x21) // version 2, PROXY
	if src.Is4() && dst.Is4() {
		b = append(b, 0x11) // INET, STREAM
		b = binary.BigEndian.AppendUint16(b, 12)
		b = append(b, src.AsSlice()...)
		b = append(b, dst.AsSlice()...)
	} else {
		b = append(b, 0x21) // INET6, STREAM
		b = binary.BigEndian.AppendUint16(b, 36)
		s16, d16 := src.As16(), dst.As16()
		b = append(b, s16[:]...)
		b = append(b, d16[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, client.Port())
	return binary.BigEndian.AppendUint16(b, vip.Port())
}

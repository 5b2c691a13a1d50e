package dataplane

import (
	"net"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/outrigger-ccm/outrigger/pkg/provider/gatewayconfig"
)

// Settings are the programming's settings (a Gateway's parametersRef).
type Settings = gatewayconfig.Settings

// MaxTrustedHops bounds Settings.TrustedHops: the controller refuses more.
const MaxTrustedHops = 10

// settings are what a Proxy serves with now: its Limits' timeouts, each
// replaced by the programming's where that gives one. A programming
// without settings serves exactly as the Limits say.
type settings struct {
	requestHeader, idle, streamIdle, tcpIdle time.Duration
	trustedHops                              int
	// proxyProtocol: every connection of a TCP-based port starts with a
	// PROXY protocol header (proxyprotocol.go).
	proxyProtocol bool
	// accessLog is the share of HTTP requests logged (accesslog.go): 0
	// none, 1 every one.
	accessLog float64
	// gateway is the Gateway served (namespace/name), for the access log.
	gateway string
}

func settingsOf(l Limits, s *Settings) settings {
	out := settings{requestHeader: l.RequestHeaderTimeout, idle: l.IdleTimeout, streamIdle: l.StreamIdleTimeout, tcpIdle: l.TCPIdleTimeout}
	if s == nil {
		return out
	}
	set := func(d *time.Duration, v time.Duration) {
		if v > 0 {
			*d = v
		}
	}
	set(&out.requestHeader, s.RequestHeaderTimeout)
	set(&out.idle, s.IdleTimeout)
	set(&out.streamIdle, s.StreamIdleTimeout)
	set(&out.tcpIdle, s.TCPIdleTimeout)
	out.trustedHops = min(max(s.TrustedHops, 0), MaxTrustedHops)
	out.proxyProtocol = s.ProxyProtocol
	// NaN and anything out of [0, 1] the controller refuses; here it
	// logs nothing or everything.
	if s.AccessLog > 0 {
		out.accessLog = min(s.AccessLog, 1)
	}
	return out
}

// setForwarded writes, on the request to a backend, who the client is as
// far as the data plane can tell, and nothing a client could have made up
// beyond what trustedHops proxies in front vouch for:
//
//   - X-Forwarded-For: the last trustedHops entries the request came with
//     (each appended by a trusted proxy, the first of them the client),
//     then the peer's address. With 0 trusted hops, or fewer entries than
//     trusted hops (the request did not come through those proxies), only
//     the peer's address. Entries left of the trusted ones are dropped: a
//     backend reading the leftmost entry gets the client, not a claim.
//   - X-Real-IP: the client: the first trusted entry, or the peer.
//   - X-Forwarded-Proto: the incoming one when trusted hops vouch for it
//     (a proxy in front that terminated TLS), otherwise http or https as
//     the client reached this listener (Envoy trusts it alike only with
//     trusted hops).
//   - X-Forwarded-Host: the request's host. Forwarded (RFC 7239) is
//     removed (the reverse proxy drops it before Rewrite).
//
// Envoy keeps the untrusted entries too; here they go, so that the
// header's every entry is one the Gateway's owner trusts.
func setForwarded(pr *httputil.ProxyRequest, trustedHops int) {
	pr.SetXForwarded() // X-Forwarded-Host, and the others replaced below
	peer := pr.In.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	kept := trustedEntries(pr.In.Header.Values("X-Forwarded-For"), trustedHops)
	client := peer
	if len(kept) > 0 {
		client = kept[0]
	}
	out := pr.Out.Header
	out.Set("X-Forwarded-For", strings.Join(append(kept, peer), ", "))
	out.Set("X-Real-IP", client)
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	if in := strings.ToLower(strings.TrimSpace(pr.In.Header.Get("X-Forwarded-Proto"))); len(kept) > 0 && (in == "http" || in == "https") {
		proto = in
	}
	out.Set("X-Forwarded-Proto", proto)
}

// trustedEntries are the last hops entries of X-Forwarded-For (its lines
// joined, as RFC 9110 reads repeated fields), or none when it has fewer:
// a request that did not pass every trusted proxy vouches for nothing.
func trustedEntries(lines []string, hops int) []string {
	if hops <= 0 {
		return nil
	}
	var all []string
	for _, l := range lines {
		for e := range strings.SplitSeq(l, ",") {
			if e = strings.TrimSpace(e); e != "" {
				all = append(all, e)
			}
		}
	}
	if len(all) < hops {
		return nil
	}
	return append([]string(nil), all[len(all)-hops:]...)
}

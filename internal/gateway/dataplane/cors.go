package dataplane

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A rule's CORS filter is compiled when the configuration is applied
// (compileCORS): its origins parsed, its lists joined into the header
// values answered. A request then only compares its Origin with the
// patterns and copies those values (corsPolicy.answer).
//
// The route's filter is the one CORS answer: what the backend says in
// the headers the gateway answers is dropped (stripCORS), whether or not
// the origin is allowed, so that one policy holds for the route.

// corsPolicy is one CORS filter, compiled.
type corsPolicy struct {
	// anyOrigin: allowOrigins is "*".
	anyOrigin   bool
	origins     []originPattern
	credentials bool
	// methods, headers and expose are the configured lists as header
	// values ("" for none); anyMethod, anyHeader and anyExpose say the
	// list is "*".
	methods, headers, expose        string
	anyMethod, anyHeader, anyExpose bool
	maxAge                          string
}

// originPattern is one allowed origin: scheme and port (the scheme's own
// when not written), and a host that is equal, or ends with suffix after
// one character or more (a wildcard "*." takes any labels to its left),
// or is any host (a wildcard alone).
type originPattern struct {
	scheme  string
	port    int
	host    string
	suffix  string
	anyHost bool
}

// defaultMaxAge is how long a client keeps a preflight's answer when the
// filter does not say (the specification's default).
const defaultMaxAge = "5"

// CheckCORS says whether the data plane can serve a CORS filter: the
// controller refuses the route otherwise, so that one route never makes
// the data plane refuse a whole configuration.
func CheckCORS(f *gwv1.HTTPCORSFilter) error {
	_, err := compileCORS(f)
	return err
}

func compileCORS(f *gwv1.HTTPCORSFilter) (*corsPolicy, error) {
	if f == nil {
		return nil, errors.New("filter CORS without its cors settings")
	}
	p := &corsPolicy{credentials: f.AllowCredentials != nil && *f.AllowCredentials, maxAge: defaultMaxAge}
	for _, o := range f.AllowOrigins {
		if o == "*" {
			p.anyOrigin = true
			continue
		}
		op, err := parseOriginPattern(string(o))
		if err != nil {
			return nil, err
		}
		p.origins = append(p.origins, op)
	}
	var err error
	methods := make([]string, 0, len(f.AllowMethods))
	for _, m := range f.AllowMethods {
		methods = append(methods, string(m))
	}
	if p.methods, p.anyMethod, err = tokenList("allowMethods method", methods); err != nil {
		return nil, err
	}
	if p.headers, p.anyHeader, err = tokenList("allowHeaders header", headerNames(f.AllowHeaders)); err != nil {
		return nil, err
	}
	if p.expose, p.anyExpose, err = tokenList("exposeHeaders header", headerNames(f.ExposeHeaders)); err != nil {
		return nil, err
	}
	switch {
	case f.MaxAge < 0:
		return nil, fmt.Errorf("maxAge %d: not a number of seconds", f.MaxAge)
	case f.MaxAge > 0:
		p.maxAge = strconv.Itoa(int(f.MaxAge))
	}
	return p, nil
}

func headerNames(hs []gwv1.HTTPHeaderName) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, string(h))
	}
	return out
}

// tokenList joins method or header names into a header value; wildcard
// says the list holds "*". A name that is not an HTTP token would write
// something else than a list into the response's headers: refused.
func tokenList(what string, names []string) (value string, wildcard bool, err error) {
	kept := make([]string, 0, len(names))
	for _, n := range names {
		switch {
		case n == "*":
			wildcard = true
		case !isToken(n):
			return "", false, fmt.Errorf("%s %q: not an HTTP token", what, n)
		default:
			kept = append(kept, n)
		}
	}
	if wildcard {
		return "", true, nil
	}
	return strings.Join(kept, ", "), false, nil
}

// isToken: s is an RFC 9110 token (a method, a header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// parseOriginPattern reads an allowed origin: http or https, a host, an
// optional port; the host may be "*" or begin with "*.".
func parseOriginPattern(s string) (originPattern, error) {
	scheme, host, port, ok := splitOrigin(s)
	if !ok {
		return originPattern{}, fmt.Errorf("allowOrigins %q: not an origin (http or https, a host, an optional port from 1 to 65535)", s)
	}
	op := originPattern{scheme: scheme, port: port}
	switch rest, wild := strings.CutPrefix(host, "*."); {
	case host == "*":
		op.anyHost = true
	case wild && validHost(rest):
		op.suffix = "." + rest
	case validHost(host):
		op.host = host
	default:
		return originPattern{}, fmt.Errorf("allowOrigins %q: host %q is not a hostname, an IP address, \"*\" or \"*.\" and a hostname", s, host)
	}
	return op, nil
}

// splitOrigin reads scheme://host[:port] (scheme and host lower-cased, the
// port the scheme's own when not written); not ok for anything else: a
// path, user information, an opaque origin ("null"), another scheme.
func splitOrigin(s string) (scheme, host string, port int, ok bool) {
	scheme, rest, found := strings.Cut(s, "://")
	if !found {
		return "", "", 0, false
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", "", 0, false
	}
	host, portText, hasPort := rest, "", false
	if strings.HasPrefix(rest, "[") {
		// An IPv6 literal holds colons of its own.
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return "", "", 0, false
		}
		host = rest[:end+1]
		if after := rest[end+1:]; after != "" {
			if after[0] != ':' {
				return "", "", 0, false
			}
			portText, hasPort = after[1:], true
		}
	} else if i := strings.IndexByte(rest, ':'); i >= 0 {
		host, portText, hasPort = rest[:i], rest[i+1:], true
	}
	if host == "" {
		return "", "", 0, false
	}
	if hasPort {
		n, valid := portNumber(portText)
		if !valid {
			return "", "", 0, false
		}
		port = n
	}
	return scheme, strings.ToLower(host), port, true
}

// portNumber reads 1 to 5 digits making 1 to 65535.
func portNumber(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n >= 1 && n <= 65535
}

// validHost: a host name of letters, digits, hyphens and dots (no empty
// label), or an IPv6 literal in brackets. It reads the host in place, as
// it runs on requests' origins too.
func validHost(h string) bool {
	if h == "" {
		return false
	}
	if strings.HasPrefix(h, "[") {
		inner, ok := strings.CutSuffix(h[1:], "]")
		return ok && inner != "" && strings.Trim(inner, "0123456789abcdefABCDEF:.") == ""
	}
	label := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-':
			label++
		default:
			return false
		}
	}
	return label > 0
}

// allows: origin is one the policy names. A malformed or opaque origin
// ("null": sandboxed documents, local files) is allowed by none, not even
// by "*" when credentials are: it would be echoed to a page that cannot
// be told apart from any other.
func (p *corsPolicy) allows(origin string) bool {
	scheme, host, port, ok := splitOrigin(origin)
	if !ok || !validHost(host) {
		return false
	}
	if p.anyOrigin {
		return true
	}
	for _, o := range p.origins {
		if o.scheme != scheme || o.port != port {
			continue
		}
		switch {
		case o.anyHost,
			o.host != "" && host == o.host,
			o.suffix != "" && len(host) > len(o.suffix) && strings.HasSuffix(host, o.suffix):
			return true
		}
	}
	return false
}

// corsAnswer is what a CORS filter answers one request: the headers it
// sets ("" for none), and whether the request is a preflight the gateway
// answers itself instead of the backend.
type corsAnswer struct {
	preflight bool
	// varyOrigin: the answer depends on the Origin, so a cache must keep
	// one answer per origin.
	varyOrigin       bool
	allowOrigin      string
	allowCredentials bool
	allowMethods     string
	allowHeaders     string
	exposeHeaders    string
	// exposeAll: expose every header of the backend's response, by name,
	// as "*" is not allowed with credentials.
	exposeAll bool
	maxAge    string
}

// answer decides what the policy answers a request of that method and
// those headers. A preflight is an OPTIONS request with an Origin and an
// Access-Control-Request-Method (the Fetch standard's); any other request
// is an actual request, whose response carries the allowed origin. Under
// "*", the answer is the same for every origin ("*") unless credentials
// are allowed: then the origin itself, as "*" is not allowed with
// credentials; the same goes for methods and headers, echoing what the
// preflight asks. A preflight is answered with the configured lists: the
// client, not the gateway, refuses a method or header not in them.
func (p *corsPolicy) answer(method string, h http.Header) corsAnswer {
	origin := firstValue(h, "Origin")
	var a corsAnswer
	_, asksMethod := h["Access-Control-Request-Method"]
	a.preflight = method == http.MethodOptions && origin != "" && asksMethod
	switch {
	case p.anyOrigin && !p.credentials:
		a.allowOrigin = "*"
	case origin != "" && p.allows(origin):
		a.varyOrigin, a.allowOrigin = true, origin
	default:
		a.varyOrigin = true
		return a
	}
	a.allowCredentials = p.credentials
	switch {
	case !p.anyExpose:
		a.exposeHeaders = p.expose
	case !p.credentials:
		a.exposeHeaders = "*"
	case !a.preflight:
		// A preflight has no response of the backend to name headers of.
		a.exposeAll = true
	}
	if !a.preflight {
		return a
	}
	a.maxAge = p.maxAge
	switch {
	case !p.anyMethod:
		a.allowMethods = p.methods
	case p.credentials:
		a.allowMethods = firstValue(h, "Access-Control-Request-Method")
	default:
		a.allowMethods = "*"
	}
	switch {
	case !p.anyHeader:
		a.allowHeaders = p.headers
	case p.credentials:
		a.allowHeaders = strings.Join(h["Access-Control-Request-Headers"], ", ")
	default:
		a.allowHeaders = "*"
	}
	return a
}

// firstValue is a header's first value, its name already canonical (no
// canonicalization per request).
func firstValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// write sets the answer's headers.
func (a *corsAnswer) write(h http.Header) {
	set := func(name, v string) {
		if v != "" {
			h[name] = []string{v}
		}
	}
	set("Access-Control-Allow-Origin", a.allowOrigin)
	if a.allowCredentials {
		set("Access-Control-Allow-Credentials", "true")
	}
	set("Access-Control-Allow-Methods", a.allowMethods)
	set("Access-Control-Allow-Headers", a.allowHeaders)
	set("Access-Control-Expose-Headers", a.exposeHeaders)
	set("Access-Control-Max-Age", a.maxAge)
	if a.varyOrigin {
		h.Add("Vary", "Origin")
	}
}

// serveCORS applies a rule's CORS policy to a request: it answers a
// preflight itself (done), or sets the actual response's headers and
// returns the answer, which the response from the backend completes.
func serveCORS(w http.ResponseWriter, req *http.Request, p *corsPolicy) (a *corsAnswer, done bool) {
	ans := p.answer(req.Method, req.Header)
	ans.write(w.Header())
	if ans.preflight {
		w.WriteHeader(http.StatusNoContent)
		return nil, true
	}
	return &ans, false
}

// stripCORS drops from a backend's response the headers the gateway
// answers (set on the response already) for a route with a CORS filter.
func stripCORS(h http.Header) {
	delete(h, "Access-Control-Allow-Origin")
	delete(h, "Access-Control-Allow-Credentials")
	delete(h, "Access-Control-Expose-Headers")
}

// exposeAllOf names a response's headers for Access-Control-Expose-Headers,
// sorted, leaving out those a client sees anyway (CORS-safelisted) or never
// (Set-Cookie); "" when none is left.
func exposeAllOf(h http.Header) string {
	names := make([]string, 0, len(h))
	for name := range h {
		switch name {
		case "Cache-Control", "Content-Language", "Content-Length", "Content-Type", "Expires", "Last-Modified", "Pragma",
			"Set-Cookie", "Set-Cookie2":
			continue
		}
		if strings.HasPrefix(name, "Access-Control-") {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

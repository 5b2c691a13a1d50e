package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// router is one HTTP port's compiled virtual hosts.
type router struct {
	port int32
	// listener is the port's listenerName, for the metrics.
	listener string
	exact    map[string]*vhost
	// wild are the wildcard hosts by their suffix: "*.example.com" by
	// ".example.com".
	wild map[string]*vhost
	any  *vhost
	tls  bool
	// listeners are an HTTPS port's listener hostnames ("" one without),
	// lower case: a request for another listener's host than its
	// connection's is misdirected (misdirected.go).
	listeners []string
	proxy     *httputil.ReverseProxy
	// mirrors sends the rules' mirrored requests; nil mirrors none.
	mirrors *mirrorer
	// allowed are the routes' valid backends, for revoking requests in
	// flight that the next programming no longer allows.
	allowed map[allowKey]struct{}
	// tlsKeys are the keys of the TLS backends' settings, whose
	// transports Apply keeps.
	tlsKeys []string
}

type vhost struct {
	name  string
	rules *ruleIndex
}

type rule struct {
	route    string
	path     gwv1.PathMatchType
	value    string
	pathRE   *regexp.Regexp
	method   string
	headers  []valueMatch
	query    []valueMatch
	filters  []gwv1.HTTPRouteFilter
	cors     *corsPolicy
	backends []Backend
	// tls are the backends' compiled BackendTLS, by index (nil entries
	// plain); nil when none has one.
	tls      []*backendTLSConn
	grpc     bool
	timeouts routeTimeouts
	// retry is the rule's retry stanza (retry.go); nil, none.
	retry   *retryPolicy
	mirrors []Mirror
}

type valueMatch struct {
	name  string
	value string
	re    *regexp.Regexp
}

func (m valueMatch) holds(got string, present bool) bool {
	if !present {
		return false
	}
	if m.re != nil {
		return m.re.MatchString(got)
	}
	return got == m.value
}

// compileHTTP turns a port's virtual hosts into a router; an invalid
// regular expression is an error (the controller refuses the route before
// it gets here).
func compileHTTP(p Port, proxy *httputil.ReverseProxy, client *backendClient) (*router, error) {
	r := &router{port: p.Port, listener: listenerName(p.Protocol, p.Port), exact: map[string]*vhost{}, wild: map[string]*vhost{}, tls: p.Protocol == HTTPS, proxy: proxy, allowed: map[allowKey]struct{}{}}
	if r.tls {
		for _, c := range p.Certificates {
			r.listeners = append(r.listeners, strings.ToLower(c.Hostname))
		}
	}
	for _, h := range p.Hosts {
		v := &vhost{name: h.Hostname}
		rules := make([]*rule, 0, len(h.Rules))
		for _, cr := range h.Rules {
			ru, err := compileRule(cr, client)
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", cr.Route, err)
			}
			rules = append(rules, ru)
			for _, tb := range ru.tls {
				if tb != nil {
					r.tlsKeys = append(r.tlsKeys, tb.key)
				}
			}
			for _, b := range cr.Backends {
				if !b.Invalid {
					r.allowed[allowKey{cr.Route, b.Address}] = struct{}{}
				}
			}
		}
		v.rules = newRuleIndex(rules)
		switch name := strings.ToLower(h.Hostname); {
		case name == "":
			r.any = v
		case strings.HasPrefix(name, "*."):
			r.wild[name[1:]] = v
		default:
			r.exact[name] = v
		}
	}
	return r, nil
}

// compileRule compiles one rule; client is the certificate its TLS
// backends are presented (nil: none).
func compileRule(cr Rule, client *backendClient) (*rule, error) {
	ru := &rule{route: cr.Route, filters: cr.Filters, backends: cr.Backends, grpc: cr.GRPC, mirrors: cr.Mirrors, path: gwv1.PathMatchPathPrefix, value: "/"}
	t, err := parseTimeouts(cr.Timeouts)
	if err != nil {
		return nil, err
	}
	ru.timeouts = t
	if ru.retry, err = parseRetry(cr.Retry, t.backend); err != nil {
		return nil, err
	}
	for i, b := range cr.Backends {
		tb, err := compileBackendTLS(b.TLS, client)
		if err != nil {
			return nil, err
		}
		if tb != nil {
			if ru.tls == nil {
				ru.tls = make([]*backendTLSConn, len(cr.Backends))
			}
			ru.tls[i] = tb
		}
	}
	for _, f := range cr.Filters {
		if f.Type == gwv1.HTTPRouteFilterCORS {
			if ru.cors, err = compileCORS(f.CORS); err != nil {
				return nil, err
			}
		}
	}
	if p := cr.Match.Path; p != nil {
		if p.Type != nil {
			ru.path = *p.Type
		}
		if p.Value != nil {
			ru.value = *p.Value
		}
		if ru.path == gwv1.PathMatchRegularExpression {
			re, err := regexp.Compile("^(?:" + ru.value + ")$")
			if err != nil {
				return nil, fmt.Errorf("path regular expression %q: %w", ru.value, err)
			}
			ru.pathRE = re
		}
	}
	if cr.Match.Method != nil {
		ru.method = string(*cr.Match.Method)
	}
	for _, h := range cr.Match.Headers {
		m := valueMatch{name: http.CanonicalHeaderKey(string(h.Name)), value: h.Value}
		if h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression {
			re, err := regexp.Compile(h.Value)
			if err != nil {
				return nil, fmt.Errorf("header %s regular expression: %w", h.Name, err)
			}
			m.re = re
		}
		ru.headers = append(ru.headers, m)
	}
	for _, q := range cr.Match.QueryParams {
		m := valueMatch{name: string(q.Name), value: q.Value}
		if q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression {
			re, err := regexp.Compile(q.Value)
			if err != nil {
				return nil, fmt.Errorf("query parameter %s regular expression: %w", q.Name, err)
			}
			m.re = re
		}
		ru.query = append(ru.query, m)
	}
	return ru, nil
}

// host picks the virtual host for a request's host: exact, then the
// longest wildcard, then the one for any host.
func (r *router) host(host string) *vhost {
	// Only a host with a colon may have a port (SplitHostPort's error
	// allocates, per request).
	if strings.IndexByte(host, ':') >= 0 {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if v, ok := r.exact[host]; ok {
		return v
	}
	// The longest wildcard that covers the host: its suffixes from the
	// longest, each after a label (a wildcard stands for one label or more,
	// never none).
	for i := 1; i < len(host); i++ {
		if host[i] == '.' {
			if v, ok := r.wild[host[i:]]; ok {
				return v
			}
		}
	}
	return r.any
}

func (ru *rule) matches(req *http.Request) bool {
	path := req.URL.Path
	if path == "" {
		path = "/"
	}
	switch ru.path {
	case gwv1.PathMatchExact:
		if path != ru.value {
			return false
		}
	case gwv1.PathMatchRegularExpression:
		if !ru.pathRE.MatchString(path) {
			return false
		}
	default:
		if !prefixMatch(path, ru.value) {
			return false
		}
	}
	if ru.method != "" && req.Method != ru.method {
		return false
	}
	for _, h := range ru.headers {
		vals, ok := req.Header[h.name]
		got := strings.Join(vals, ",")
		if h.name == "Host" {
			got, ok = req.Host, true
		}
		if !h.holds(got, ok) {
			return false
		}
	}
	if len(ru.query) > 0 {
		q := req.URL.Query()
		for _, m := range ru.query {
			vals, ok := q[m.name]
			got := ""
			if ok {
				got = vals[0]
			}
			if !m.holds(got, ok) {
				return false
			}
		}
	}
	return true
}

// prefixMatch matches path elements: /foo matches /foo, /foo/ and /foo/bar,
// never /foobar; a trailing slash in the prefix is ignored.
func prefixMatch(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}

func (r *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.serveOn(w, req, nil)
}

// serveOn serves a request, recording it among the port's flights (when
// given) while it is proxied.
func (r *router) serveOn(w http.ResponseWriter, req *http.Request, fl *flights) {
	if r.answerMisdirected(w, req) {
		return
	}
	np, ok := normalizePath(req.URL.EscapedPath())
	if !ok {
		http.Error(w, "path must begin with /", http.StatusBadRequest)
		return
	}
	if np.redirect {
		loc := np.escaped
		if req.URL.RawQuery != "" {
			loc += "?" + req.URL.RawQuery
		}
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	req.URL.Path, req.URL.RawPath = np.decoded, np.escaped
	exchangeOf(w).path = np.escaped
	v := r.host(req.Host)
	if v == nil {
		notFound(w, req, "no route for this host")
		return
	}
	if ru := v.rules.match(req); ru != nil {
		r.serve(w, req, ru, fl)
		return
	}
	notFound(w, req, "no route matches")
}

// notFound answers a request no rule takes: a gRPC call with the status
// UNIMPLEMENTED, as for a method no server has.
func notFound(w http.ResponseWriter, req *http.Request, msg string) {
	if isGRPC(req) {
		grpcError(w, grpcUnimplemented, msg)
		return
	}
	http.Error(w, msg, http.StatusNotFound)
}

func (r *router) serve(w http.ResponseWriter, req *http.Request, ru *rule, fl *flights) {
	x := exchangeOf(w)
	x.route = ru.route
	var cors *corsAnswer
	if ru.cors != nil {
		var done bool
		if cors, done = serveCORS(w, req, ru.cors); done {
			return
		}
	}
	var respMods []*gwv1.HTTPHeaderFilter
	for i := range ru.filters {
		f := &ru.filters[i]
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestRedirect:
			r.redirect(w, req, ru, f.RequestRedirect)
			return
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			modifyHeaders(req.Header, f.RequestHeaderModifier)
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			respMods = append(respMods, f.ResponseHeaderModifier)
		case gwv1.HTTPRouteFilterURLRewrite:
			rewrite(req, ru, f.URLRewrite)
		}
	}
	bi, ok := pickBackendAt(ru.backends)
	if !ok {
		if ru.grpc {
			grpcError(w, grpcUnavailable, "backend not available")
			return
		}
		http.Error(w, "backend not available", http.StatusInternalServerError)
		return
	}
	b := ru.backends[bi]
	x.backend = b.Address
	var tb *backendTLSConn
	if ru.tls != nil {
		tb = ru.tls[bi]
	}
	// Mirrors see the request as the rule's filters left it, before the
	// chosen backend's own.
	defer r.mirrors.start(req, ru.route, ru.mirrors)()
	for i := range b.Filters {
		f := &b.Filters[i]
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			modifyHeaders(req.Header, f.RequestHeaderModifier)
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			respMods = append(respMods, f.ResponseHeaderModifier)
		}
	}
	// The backend's own mirrors see its filters' work too.
	defer r.mirrors.start(req, ru.route, b.Mirrors)()
	ctx, cancel := ru.timeouts.bound(req.Context(), ru.retry != nil)
	defer cancel()
	if fl != nil {
		end := x.end
		if end == nil {
			// Not behind the idle guard: a context of its own to end.
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			defer cancel(nil)
			end = cancel
		}
		f := &flight{route: ru.route, backend: b.Address, cancel: end}
		fl.add(f)
		defer fl.done(f)
	}
	ctx = withTarget(ctx, target{listener: r.listener, route: ru.route, address: b.Address, h2c: b.H2C, tls: tb, respMods: respMods, cors: cors, retry: ru.retry})
	r.proxy.ServeHTTP(w, req.WithContext(ctx))
}

func modifyHeaders(h http.Header, f *gwv1.HTTPHeaderFilter) {
	if f == nil {
		return
	}
	for _, s := range f.Set {
		h.Set(string(s.Name), s.Value)
	}
	for _, a := range f.Add {
		h.Add(string(a.Name), a.Value)
	}
	for _, name := range f.Remove {
		h.Del(name)
	}
}

// replacePath applies a path modifier to the matched request path, both
// escaped: what is not replaced keeps the client's spelling (an escaped "?"
// or "+" stays escaped), and a replacement is escaped as a path.
func replacePath(escaped string, ru *rule, m *gwv1.HTTPPathModifier) string {
	if m == nil {
		return escaped
	}
	switch m.Type {
	case gwv1.FullPathHTTPPathModifier:
		if m.ReplaceFullPath != nil {
			return escapePath(*m.ReplaceFullPath)
		}
	case gwv1.PrefixMatchHTTPPathModifier:
		if m.ReplacePrefixMatch == nil || ru.path != gwv1.PathMatchPathPrefix {
			return escaped
		}
		rest := trimSegments(escaped, segments(ru.value))
		repl := escapePath(strings.TrimSuffix(*m.ReplacePrefixMatch, "/"))
		switch {
		case rest == "" && repl == "":
			return "/"
		case rest == "":
			return repl
		}
		return repl + rest
	}
	return escaped
}

func escapePath(p string) string {
	return (&url.URL{Path: p}).EscapedPath()
}

func rewrite(req *http.Request, ru *rule, f *gwv1.HTTPURLRewriteFilter) {
	if f == nil {
		return
	}
	if f.Hostname != nil {
		req.Host = string(*f.Hostname)
	}
	if f.Path != nil {
		escaped := replacePath(req.URL.EscapedPath(), ru, f.Path)
		decoded, err := url.PathUnescape(escaped)
		if err != nil {
			decoded = escaped
		}
		req.URL.Path, req.URL.RawPath = decoded, escaped
	}
}

func (r *router) redirect(w http.ResponseWriter, req *http.Request, ru *rule, f *gwv1.HTTPRequestRedirectFilter) {
	scheme := "http"
	if r.tls {
		scheme = "https"
	}
	host := req.Host
	port := ""
	if h, p, err := net.SplitHostPort(req.Host); err == nil {
		host, port = h, p
	}
	if port == "" {
		port = strconv.Itoa(int(r.port))
	}
	if f.Scheme != nil {
		scheme = *f.Scheme
		// A new scheme without a port goes to that scheme's own port.
		port = ""
	}
	if f.Hostname != nil {
		host = string(*f.Hostname)
	}
	if f.Port != nil {
		port = strconv.Itoa(int(*f.Port))
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	path := replacePath(req.URL.EscapedPath(), ru, f.Path)
	loc := scheme + "://" + host
	if port != "" {
		loc = scheme + "://" + net.JoinHostPort(host, port)
	}
	loc += path
	if req.URL.RawQuery != "" {
		loc += "?" + req.URL.RawQuery
	}
	code := http.StatusFound
	if f.StatusCode != nil {
		code = *f.StatusCode
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}

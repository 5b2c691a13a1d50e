package dataplane

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// seen is what a mirror backend received.
type seen struct {
	method, uri, host, body string
	header                  http.Header
}

// mirrorBackend records each request it receives on the returned channel,
// then waits for hold (nil: answers at once).
func mirrorBackend(t *testing.T, hold chan struct{}) (string, chan seen) {
	got := make(chan seen, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{method: r.Method, uri: r.URL.RequestURI(), host: r.Host, body: string(body), header: r.Header.Clone()}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ignored")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), got
}

// mirrored serves one rule on every path: backend a, with a header
// modifier, mirrored to each address.
func mirrored(t *testing.T, lim Limits, backend string, mirrors ...Mirror) (*Proxy, string) {
	t.Helper()
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
		Route: "ns/mirrored",
		Match: gwv1.HTTPRouteMatch{Path: prefix("/")},
		Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
			Set: []gwv1.HTTPHeader{{Name: "X-Header-Set", Value: "set"}}, Remove: []string{"X-Header-Remove"},
		}}},
		Backends: []Backend{{Address: backend, Weight: 1}},
		Mirrors:  mirrors,
	}}}}}}}
	var l loopback
	o := l.options()
	o.Limits = lim
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return p, l.at(t, "tcp/80")
}

func send(t *testing.T, method, url, body string, header map[string]string) *http.Response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "shop.example.com"
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestAMirrorReceivesTheRequestAsTheBackendIsSentIt(t *testing.T) {
	maddr, got := mirrorBackend(t, nil)
	_, addr := mirrored(t, Limits{}, echo(t, "a"), Mirror{Address: maddr})

	resp := send(t, http.MethodPost, "http://"+addr+"/orders?id=7", "the body", map[string]string{"X-Header-Remove": "gone", "Foo": "bar", "Connection": "close"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Backend") != "a" {
		t.Fatalf("answered %d by %q, want 200 by a", resp.StatusCode, resp.Header.Get("X-Backend"))
	}
	m := <-got
	want := seen{method: http.MethodPost, uri: "/orders?id=7", host: "shop.example.com", body: "the body"}
	if m.method != want.method || m.uri != want.uri || m.host != want.host || m.body != want.body {
		t.Errorf("mirror received %s %s host %q body %q, want %s %s host %q body %q", m.method, m.uri, m.host, m.body, want.method, want.uri, want.host, want.body)
	}
	// The rule's filters apply to the copy; the client's hop-by-hop
	// headers do not travel; X-Forwarded-For is the backend's.
	for name, v := range map[string]string{"X-Header-Set": "set", "X-Header-Remove": "", "Foo": "bar", "X-Forwarded-For": "127.0.0.1", "User-Agent": "Go-http-client/1.1"} {
		if g := m.header.Get(name); g != v {
			t.Errorf("mirror received %s %q, want %q", name, g, v)
		}
	}
}

func TestARequestWithoutBodyIsMirroredToEveryMirror(t *testing.T) {
	m1, got1 := mirrorBackend(t, nil)
	m2, got2 := mirrorBackend(t, nil)
	_, addr := mirrored(t, Limits{}, echo(t, "a"), Mirror{Address: m1}, Mirror{Address: m2})

	send(t, http.MethodGet, "http://"+addr+"/page", "", nil)
	for _, got := range []chan seen{got1, got2} {
		if m := <-got; m.method != http.MethodGet || m.uri != "/page" || m.body != "" {
			t.Errorf("mirror received %s %s body %q, want GET /page without body", m.method, m.uri, m.body)
		}
	}
}

func TestABackendsMirrorCopiesOnlyTheRequestsThatBackendIsSent(t *testing.T) {
	maddr, got := mirrorBackend(t, nil)
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/other")}, Backends: []Backend{{Address: echo(t, "b"), Weight: 1}}},
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{
			Address: echo(t, "a"), Weight: 1, Mirrors: []Mirror{{Address: maddr}},
			Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
				Set: []gwv1.HTTPHeader{{Name: "X-Backend-Header", Value: "a"}},
			}}},
		}}},
	}}}}}}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")

	send(t, http.MethodGet, "http://"+addr+"/other", "", nil)
	send(t, http.MethodGet, "http://"+addr+"/page", "", nil)
	// /other's backend has no mirror: the only request mirrored is /page's.
	if m := <-got; m.uri != "/page" || m.header.Get("X-Backend-Header") != "a" {
		t.Errorf("mirror received %s with X-Backend-Header %q, want /page with the backend's filter applied", m.uri, m.header.Get("X-Backend-Header"))
	}
}

func TestTheRequestIsNotHeldByAMirrorThatHangsOrFails(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	hanging, got := mirrorBackend(t, hold)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, addr := mirrored(t, Limits{}, echo(t, "a"), Mirror{Address: hanging}, Mirror{Address: closed})

	resp := send(t, http.MethodPost, "http://"+addr+"/", "body", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Backend") != "a" {
		t.Fatalf("answered %d by %q, want 200 by a", resp.StatusCode, resp.Header.Get("X-Backend"))
	}
	// The hanging mirror has its request, and holds it still.
	if m := <-got; m.body != "body" {
		t.Errorf("hanging mirror received body %q", m.body)
	}
}

func TestMirrorsBeyondTheLimitAreDroppedAndCounted(t *testing.T) {
	hold := make(chan struct{})
	hanging, got := mirrorBackend(t, hold)
	p, addr := mirrored(t, Limits{MaxMirrors: 2}, echo(t, "a"), Mirror{Address: hanging})
	metrics := NewMetrics(prometheus.NewRegistry(), p)

	for range 4 {
		if resp := send(t, http.MethodGet, "http://"+addr+"/", "", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("answered %d, want 200 whatever the mirrors", resp.StatusCode)
		}
	}
	<-got
	<-got
	if d := testutil.ToFloat64(metrics.mirrors); d != 2 {
		t.Errorf("%v mirrors dropped, want 2 (two held slots of two)", d)
	}
	close(hold)
}

func TestSampledTakesItsShareOfTheDraws(t *testing.T) {
	for _, tc := range []struct {
		m    Mirror
		want int
	}{
		{Mirror{}, 100},
		{Mirror{Numerator: 20, Denominator: 100}, 20},
		{Mirror{Numerator: 25, Denominator: 50}, 50},
		{Mirror{Numerator: 0, Denominator: 100}, 0},
		{Mirror{Numerator: 100, Denominator: 100}, 100},
	} {
		// Draws spread evenly over [0, n), as many as 100 requests take.
		i := int32(0)
		draw := func(n int32) int32 { i++; return (i - 1) % n }
		n := 0
		for range 100 {
			if sampled(tc.m, draw) {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("%d/%d: %d of 100 sampled, want %d", tc.m.Numerator, tc.m.Denominator, n, tc.want)
		}
	}
}

func TestAPercentageMirrorTakesTheRequestsItsDrawSamples(t *testing.T) {
	maddr, got := mirrorBackend(t, nil)
	p, addr := mirrored(t, Limits{}, echo(t, "a"), Mirror{Address: maddr, Numerator: 1, Denominator: 2})
	i := int32(0)
	p.mirrors.intn = func(n int32) int32 { i++; return i % 2 } // 1, 0, 1, 0: the second and fourth

	for n := range 4 {
		send(t, http.MethodGet, "http://"+addr+"/r"+string(rune('0'+n)), "", nil)
	}
	// The two mirrors travel on their own: either may arrive first.
	a, b := (<-got).uri, (<-got).uri
	if min(a, b) != "/r1" || max(a, b) != "/r3" {
		t.Errorf("mirror received %s and %s, want /r1 and /r3", a, b)
	}
}

// countingRT counts the requests it is asked to send.
type countingRT struct{ n int }

func (c *countingRT) RoundTrip(*http.Request) (*http.Response, error) {
	c.n++
	return nil, io.EOF
}

func TestABodyOverTheLimitOrNotReadToItsEndIsNotMirrored(t *testing.T) {
	rt := &countingRT{}
	m := newMirrorer(rt, Limits{}.withDefaults(), func() int { return 0 }, logr.Discard())
	mirrors := []Mirror{{Address: "198.18.0.1:80"}}
	chunked := func(body []byte) *http.Request {
		req := httptest.NewRequest(http.MethodPost, "http://shop.example.com/", io.NopCloser(bytes.NewReader(body)))
		req.ContentLength = -1
		return req
	}

	long := chunked(make([]byte, mirrorBodyLimit+1))
	end := m.start(long, "ns/r", mirrors)
	if len(m.slots) != 1 {
		t.Fatalf("%d slots held while the body is read, want 1", len(m.slots))
	}
	if _, err := io.Copy(io.Discard, long.Body); err != nil {
		t.Fatal(err)
	}
	if len(m.slots) != 0 {
		t.Errorf("%d slots held once the body passed the limit, want 0", len(m.slots))
	}
	end()

	unread := chunked([]byte("short"))
	end = m.start(unread, "ns/r", mirrors)
	end()
	if len(m.slots) != 0 {
		t.Errorf("%d slots held after a request whose body was not read, want 0", len(m.slots))
	}

	declared := httptest.NewRequest(http.MethodPost, "http://shop.example.com/", strings.NewReader(strings.Repeat("x", mirrorBodyLimit+1)))
	m.start(declared, "ns/r", mirrors)()
	if len(m.slots) != 0 || rt.n != 0 {
		t.Errorf("a body declared over the limit took %d slots and sent %d mirrors, want none", len(m.slots), rt.n)
	}
}

func TestABodyStillUnreadAtTheTimeoutGivesItsSlotBack(t *testing.T) {
	rt := &countingRT{}
	m := newMirrorer(rt, Limits{MaxMirrors: 1, MirrorTimeout: time.Millisecond}.withDefaults(), func() int { return 0 }, logr.Discard())
	body, w := io.Pipe()
	defer w.Close()
	req := httptest.NewRequest(http.MethodPost, "http://shop.example.com/", body)
	req.ContentLength = -1
	end := m.start(req, "ns/r", []Mirror{{Address: "198.18.0.1:80"}})
	defer end()
	// The only slot is the stream's until its timeout gives it back.
	select {
	case m.slots <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("the slot was not given back after the timeout")
	}
	if rt.n != 0 {
		t.Errorf("%d mirrors sent of a body never read, want none", rt.n)
	}
}

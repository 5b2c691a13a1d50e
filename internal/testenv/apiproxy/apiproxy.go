// Package apiproxy stands a counting, holding or answer-losing proxy between
// one client and the test package's API server (internal/testenv).
package apiproxy

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// Proxy stands between one client (an Outrigger started with
// --kubeconfig=proxy.Kubeconfig) and the package's API server. It counts
// that client's requests, which the API server cannot tell apart from other
// clients' of the same user, and lets a test hold one at a known point: a
// write in flight, say, while the instance that made it is stopped.
type Proxy struct {
	// Kubeconfig reaches the API server through the proxy, as cluster
	// admin.
	Kubeconfig string

	mu    sync.Mutex
	count map[string]int // "METHOD path"
	lost  int
}

// Start serves a proxy on loopback until the test ends. hold, if
// not nil, sees every request before it is passed on and may block; it
// returns false to drop the request (the client gets a 503). A hold that
// blocks must return once the request's context is done: that is how a
// request dies with the client that made it.
func Start(t testing.TB, hold func(*http.Request) bool) *Proxy {
	t.Helper()
	return start(t, hold, nil)
}

// StartLossy is Start whose requests for which lose says
// true reach the API server, which carries them out, but whose answers are
// lost: the client gets a 504, as from a load balancer that timed out
// waiting. What a client must never read as "it failed". With late, the
// client gets its 504 first and the API server the request only after the
// next write through the proxy (or two seconds): a write that commits after
// its client gave up.
func StartLossy(t testing.TB, late bool, lose func(*http.Request) bool) *Proxy {
	t.Helper()
	return start(t, nil, &lossy{lose: lose, late: late})
}

// lossy says which answers a proxy loses, and when it carries their
// requests out.
type lossy struct {
	lose func(*http.Request) bool
	late bool
	// wrote is closed and replaced by each write passed on, for the late
	// requests waiting for one.
	mu    sync.Mutex
	wrote chan struct{}
}

func (l *lossy) written() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
	}
	l.wrote = make(chan struct{})
}

func (l *lossy) nextWrite() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote == nil {
		l.wrote = make(chan struct{})
	}
	return l.wrote
}

func isWrite(r *http.Request) bool { return r.Method != http.MethodGet && r.Method != http.MethodHead }

func start(t testing.TB, hold func(*http.Request) bool, lose *lossy) *Proxy {
	t.Helper()
	p := &Proxy{count: map[string]int{}}
	rp := reverse(t, nil, nil)
	p.Kubeconfig = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.count[r.Method+" "+r.URL.Path]++
		p.mu.Unlock()
		if hold != nil && !hold(r) {
			http.Error(w, "dropped by the test's API proxy", http.StatusServiceUnavailable)
			return
		}
		if r.Context().Err() != nil {
			return
		}
		if lose != nil && lose.lose(r) {
			carryOut := func(r *http.Request) {
				answer := httptest.NewRecorder()
				rp.ServeHTTP(answer, r)
				if answer.Code < 300 {
					p.mu.Lock()
					p.lost++
					p.mu.Unlock()
				}
			}
			if !lose.late {
				carryOut(r)
				http.Error(w, "answer lost by the test's API proxy", http.StatusGatewayTimeout)
				return
			}
			body, _ := io.ReadAll(r.Body)
			later := r.Clone(context.Background())
			later.Body = io.NopCloser(bytes.NewReader(body))
			next := lose.nextWrite()
			go func() {
				select {
				case <-next:
				case <-time.After(2 * time.Second):
				}
				carryOut(later)
			}()
			http.Error(w, "answer lost by the test's API proxy", http.StatusGatewayTimeout)
			return
		}
		if lose != nil && isWrite(r) {
			defer lose.written()
		}
		rp.ServeHTTP(w, r)
	}))
	return p
}

// StartRewriting serves the package's API server to one client through a
// proxy that changes requests (rewrite) and answers (modify) as a test
// needs, say to show that client another cluster's view; either may be
// nil. It returns a kubeconfig through the proxy, as cluster admin.
func StartRewriting(t testing.TB, rewrite func(*httputil.ProxyRequest), modify func(*http.Response) error) string {
	t.Helper()
	return serve(t, reverse(t, rewrite, modify))
}

// reverse is a reverse proxy to the package's API server, as its admin;
// rewrite and modify, when not nil, change each request and answer.
func reverse(t testing.TB, rewrite func(*httputil.ProxyRequest), modify func(*http.Response) error) *httputil.ReverseProxy {
	t.Helper()
	target, err := url.Parse(testenv.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if target.Scheme == "" {
		target, _ = url.Parse("https://" + testenv.Config.Host)
	}
	upstream, err := rest.TransportFor(testenv.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			if rewrite != nil {
				rewrite(r)
			}
		},
		Transport: upstream,
		// Watches stream: pass every event on as it comes.
		FlushInterval:  -1,
		ModifyResponse: modify,
		// A request dies when its client goes (that is the point of
		// holding one): no log line for each.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
}

// serve serves h over TLS (and HTTP/2) on loopback until the test ends and
// returns a kubeconfig reaching it.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		// Watches of a client still running would keep Close waiting.
		srv.CloseClientConnections()
		srv.Close()
	})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Requests counts the requests made through the proxy with method to path
// (no query), e.g. GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x.
func (p *Proxy) Requests(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[method+" "+path]
}

// Lost counts the requests the API server carried out whose answers the
// proxy lost (StartLossy).
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// LeasePath is the API path of a Lease in kube-system, where Outrigger's
// leases are.
func LeasePath(name string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + name
}

// IsNodePath reports whether path is a Node's (not the collection's).
func IsNodePath(path string) (name string, ok bool) {
	name, ok = strings.CutPrefix(path, "/api/v1/nodes/")
	return name, ok && name != "" && !strings.Contains(name, "/")
}

package testenv

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// APIProxy stands between one client (an Outrigger started with
// --kubeconfig=proxy.Kubeconfig) and the package's API server. It counts
// that client's requests, which the API server cannot tell apart from other
// clients' of the same user, and lets a test hold one at a known point: a
// write in flight, say, while the instance that made it is stopped.
type APIProxy struct {
	// Kubeconfig reaches the API server through the proxy, as cluster
	// admin.
	Kubeconfig string

	mu    sync.Mutex
	count map[string]int // "METHOD path"
}

// StartAPIProxy serves a proxy on loopback until the test ends. hold, if
// not nil, sees every request before it is passed on and may block; it
// returns false to drop the request (the client gets a 503). A hold that
// blocks must return once the request's context is done: that is how a
// request dies with the client that made it.
func StartAPIProxy(t testing.TB, hold func(*http.Request) bool) *APIProxy {
	t.Helper()
	target, err := url.Parse(Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if target.Scheme == "" {
		target, _ = url.Parse("https://" + Config.Host)
	}
	upstream, err := rest.TransportFor(Config)
	if err != nil {
		t.Fatal(err)
	}
	p := &APIProxy{count: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: upstream,
		// Watches stream: pass every event on as it comes.
		FlushInterval: -1,
		// A request dies when its client goes (that is the point of
		// holding one): no log line for each.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		rp.ServeHTTP(w, r)
	}))
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
	p.Kubeconfig = filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

// Requests counts the requests made through the proxy with method to path
// (no query), e.g. GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x.
func (p *APIProxy) Requests(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[method+" "+path]
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

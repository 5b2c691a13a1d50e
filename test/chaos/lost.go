package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// lostShare is the share of the replicas' writes whose answer the
// LostResponses fault loses. At its start the fault joins lostNodes nodes
// and creates lostServices Services, whose pod CIDRs, initialization and
// load balancer status are written under it.
const (
	lostShare    = 1.0 / 3
	lostNodes    = 3
	lostServices = 2
)

// lossyProxy stands between the replicas and the API server
// (Config.LostResponses). It passes every request on; while losing, it
// lets a share of the writes (POST, PUT, PATCH, DELETE) reach the API
// server and be answered there, then loses the answer: half of them the
// client gets a 504, the other half its connection is closed. Either way
// the client sees an error for a write that committed.
type lossyProxy struct {
	handler http.Handler

	mu    sync.Mutex
	share float64
	rng   *rand.Rand
	// lost counts the answers lost; committed those of them that were a
	// success (2xx); byRequest the lost by method and resource.
	lost, committed int
	byRequest       map[string]int
}

// errLost marks an answer the proxy loses.
var errLost = errors.New("answer lost on purpose")

func newLossyProxy(upstream *url.URL, transport http.RoundTripper, seed uint64) *lossyProxy {
	p := &lossyProxy{rng: rand.New(rand.NewPCG(seed, seed^0x1f0e5)), byRequest: map[string]int{}}
	p.handler = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
		},
		Transport: transport,
		// Watches stream.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if !p.loses(resp.Request.Method) {
				return nil
			}
			// The API server has answered: the write is done (or
			// refused). Read the answer whole, then lose it.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			p.mu.Lock()
			p.lost++
			if resp.StatusCode/100 == 2 {
				p.committed++
			}
			p.byRequest[resp.Request.Method+" "+resource(resp.Request.URL.Path)]++
			p.mu.Unlock()
			return errLost
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, errLost) {
				// The API server is down (SIGKILL, paused etcd): as a
				// load balancer in front of it would answer.
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			p.mu.Lock()
			closeConn := p.rng.IntN(2) == 0
			p.mu.Unlock()
			if hj, ok := w.(http.Hijacker); ok && closeConn {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the answer was lost (chaos)","reason":"Timeout","code":504}`)
		},
	}
	return p
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.handler.ServeHTTP(w, r) }

// lose sets the share of writes whose answer is lost from now on; 0 loses
// none.
func (p *lossyProxy) lose(share float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.share = share
}

func (p *lossyProxy) loses(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.share > 0 && p.rng.Float64() < p.share
}

// counts returns the answers lost and how many of them were successes.
func (p *lossyProxy) counts() (lost, committed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost, p.committed
}

// lostByRequest counts the answers lost by method and resource.
func (p *lossyProxy) lostByRequest() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.byRequest)
}

// resource names the resource (and subresource) of an API path:
// "nodes", "services/status", "leases".
func resource(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) > 2 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) > 3 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return path
	}
	if len(seg) > 2 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	if len(seg) > 2 {
		return seg[0] + "/" + seg[2]
	}
	return seg[0]
}

// startProxy starts the lossy proxy in front of the API server, with the
// admin kubeconfig's credentials, and writes the kubeconfig the replicas
// use: the proxy's plain-HTTP loopback address, no credentials of their
// own.
func (h *harness) startProxy(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.kubecfg)
	if err != nil {
		return err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	h.proxy = newLossyProxy(upstream, transport, h.cfg.Seed)
	addr, err := h.serve(ctx, h.proxy)
	if err != nil {
		return err
	}
	h.replicaKubecfg = filepath.Join(h.dir, "kubeconfig-proxy")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: chaos
  cluster:
    server: %s
users:
- name: chaos
  user: {}
contexts:
- name: chaos
  context:
    cluster: chaos
    user: chaos
current-context: chaos
`, addr)
	return os.WriteFile(h.replicaKubecfg, []byte(kc), 0o600)
}

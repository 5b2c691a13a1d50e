package monitoring

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
)

// hangingSim is the sim provider, whose EnsureLoadBalancer, while its gate
// is shut, waits for the gate and ignores its context: a provider stuck in
// a cloud SDK call. The sim cloud cannot play that fault, as its client
// gives up with its caller's context. Every other method, and every
// optional interface of the sim provider, is the sim provider's own.
type hangingSim struct {
	*sim.Provider
	gate *gate
}

func (p *hangingSim) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return p, true }

func (p *hangingSim) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if p.gate.wait() {
		return nil, errors.New("released after hanging")
	}
	return p.Provider.EnsureLoadBalancer(ctx, clusterName, service, nodes)
}

// gate holds callers while shut.
type gate struct {
	mu   sync.Mutex
	shut chan struct{}
}

func (g *gate) hang() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

// wait blocks while the gate is shut and reports whether it did.
func (g *gate) wait() bool {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut == nil {
		return false
	}
	<-shut
	return true
}

// get fetches a URL of the secure port without credentials.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

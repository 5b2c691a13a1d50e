package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// The load a Gateway's changes must not cost a request: loadRate requests
// a second over HTTP and HTTPS on keep-alive connections, as a client
// pool does (Go's, which sends an idempotent request again when the
// server closed the connection it was reused on before answering, as
// HTTP/1.1 allows). Bounded in time and count.
const (
	loadRate     = 500
	loadWorkers  = 10
	loadMaxTime  = 4 * time.Minute
	loadMaxCount = loadRate * 240
)

type loadStats struct {
	sent, failed, versioned atomic.Int64
	mu                      sync.Mutex
	errs                    []string
}

func (s *loadStats) fail(msg string) {
	s.failed.Add(1)
	s.mu.Lock()
	if len(s.errs) < 10 {
		s.errs = append(s.errs, msg)
	}
	s.mu.Unlock()
}

// startLoad sends loadRate requests a second until stop (or its bounds).
func (w *edgeWorld) startLoad(ctx context.Context) (*loadStats, func()) {
	s := &loadStats{}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(loadMaxTime)
	for i := range loadWorkers {
		https := i%2 == 1
		tr := &http.Transport{
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     30 * time.Second,
			TLSClientConfig:     edgeTLS(w.ca),
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				port := edgeHTTP
				if https {
					port = edgeHTTPS
				}
				return w.dial(ctx, network, port)
			},
		}
		hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		url := "http://" + edgeHost + "/public/load"
		if https {
			url = "https://" + edgeHost + "/public/load"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			tick := time.NewTicker(time.Second * loadWorkers / loadRate)
			defer tick.Stop()
			for {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
				if time.Now().After(deadline) || s.sent.Load() >= loadMaxCount {
					return
				}
				s.sent.Add(1)
				resp, err := hc.Get(url)
				if err != nil {
					s.fail(err.Error())
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					s.fail("reading the answer: " + err.Error())
				case resp.StatusCode != http.StatusOK:
					s.fail(fmt.Sprintf("status %d", resp.StatusCode))
				case resp.Header.Get("X-Version") == "2":
					s.versioned.Add(1)
				}
			}
		}()
	}
	return s, func() { close(quit); wg.Wait() }
}

// checkNoRequestLostToChanges changes the Gateway four ways under load —
// a route, the listener's certificate, the pods rolled, the pods scaled up
// and down — each change waited for by what shows it took effect, and
// requires that no request failed.
func checkNoRequestLostToChanges(ctx context.Context, t *testing.T, w *edgeWorld) []string {
	stats, stop := w.startLoad(ctx)
	start := time.Now()
	var steps []string
	step := func(name string, change func() error, took func(context.Context) (bool, error)) {
		t.Helper()
		begin := time.Now()
		if err := change(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, took); err != nil {
			t.Fatalf("%s: not in effect: %v", name, err)
		}
		steps = append(steps, fmt.Sprintf("%s (%.1f s)", name, time.Since(begin).Seconds()))
	}
	step("route changed", func() error {
		return w.patch(ctx, "HTTPRoute", "public", `{"spec":{"rules":[
			{"matches":[{"path":{"type":"PathPrefix","value":"/public"}}],"backendRefs":[{"name":"echo","port":8080}],
			 "filters":[{"type":"ResponseHeaderModifier","responseHeaderModifier":{"set":[{"name":"X-Version","value":"2"}]}}]},
			{"matches":[{"path":{"type":"Exact","value":"/echo"}}],"backendRefs":[{"name":"echo","port":8080}]}]}}`)
	}, func(context.Context) (bool, error) { return stats.versioned.Load() > 0, nil })

	nextCert, nextKey := w.ca.IssueServer(t, []string{edgeHost})
	step("certificate rotated", func() error {
		s, err := w.c.Client.CoreV1().Secrets("default").Get(ctx, "edge-cert", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data = map[string][]byte{corev1.TLSCertKey: nextCert, corev1.TLSPrivateKeyKey: nextKey}
		_, err = w.c.Client.CoreV1().Secrets("default").Update(ctx, s, metav1.UpdateOptions{})
		return err
	}, func(ctx context.Context) (bool, error) {
		return bytes.Equal(w.servedCert(ctx), leafDER(t, nextCert)), nil
	})

	before := w.dataPlanePods(ctx, t)
	step("pods rolled", func() error {
		return w.patch(ctx, "Gateway", edgeGateway, `{"spec":{"infrastructure":{"annotations":{"example.com/rolled":"1"}}}}`)
	}, func(ctx context.Context) (bool, error) {
		now := w.dataPlanePods(ctx, t)
		for name := range before {
			if _, ok := now[name]; ok {
				return false, nil
			}
		}
		return w.readyPods(now) == 2 && len(now) == 2, nil
	})

	step("scaled to 3", func() error { return w.setReplicas(ctx, 3) }, func(ctx context.Context) (bool, error) {
		now := w.dataPlanePods(ctx, t)
		return w.readyPods(now) == 3, nil
	})
	step("scaled down to 2", func() error { return w.setReplicas(ctx, 2) }, func(ctx context.Context) (bool, error) {
		now := w.dataPlanePods(ctx, t)
		return len(now) == 2 && w.readyPods(now) == 2, nil
	})
	stop()
	took := time.Since(start)
	sent, failed := stats.sent.Load(), stats.failed.Load()
	if failed > 0 {
		t.Errorf("%d of %d requests failed while the Gateway changed: %v", failed, sent, stats.errs)
	}
	if sent < loadRate*10 {
		t.Errorf("only %d requests sent: the load did not run through the changes", sent)
	}
	return []string{"",
		"| under load | requests | failed | rate (requests/s) | changes, each until in effect |",
		"| --- | ---: | ---: | ---: | --- |",
		fmt.Sprintf("| HTTP and HTTPS, keep-alive | %d | %d | %.0f | %s |", sent, failed, float64(sent)/took.Seconds(), strings.Join(steps, "; ")),
	}
}

// patch merge-patches one of the edge world's Gateway API objects.
func (w *edgeWorld) patch(ctx context.Context, kind, name, patch string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: kind})
	u.SetNamespace("default")
	u.SetName(name)
	return w.cl.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// setReplicas sets the Gateway's replicas through its parametersRef.
func (w *edgeWorld) setReplicas(ctx context.Context, n int) error {
	_, err := w.c.Client.CoreV1().ConfigMaps("default").Patch(ctx, "edge-params", types.MergePatchType,
		[]byte(`{"data":{"replicas":"`+strconv.Itoa(n)+`"}}`), metav1.PatchOptions{})
	return err
}

// servedCert is the certificate the HTTPS listener serves a new
// connection (nil: none could be had).
func (w *edgeWorld) servedCert(ctx context.Context) []byte {
	raw, err := w.dial(ctx, "tcp", edgeHTTPS)
	if err != nil {
		return nil
	}
	c := tls.Client(raw, edgeTLS(w.ca))
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.HandshakeContext(ctx); err != nil {
		return nil
	}
	return c.ConnectionState().PeerCertificates[0].Raw
}

// dataPlanePods are the Gateway's data plane pods by name, those being
// deleted included.
func (w *edgeWorld) dataPlanePods(ctx context.Context, t *testing.T) map[string]corev1.Pod {
	pods, err := w.c.Client.CoreV1().Pods(gatewayNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := map[string]corev1.Pod{}
	prefix := gateway.DataPlaneName("default", edgeGateway) + "-"
	for _, p := range pods.Items {
		if len(p.Name) > len(prefix) && p.Name[:len(prefix)] == prefix {
			out[p.Name] = p
		}
	}
	return out
}

func (w *edgeWorld) readyPods(pods map[string]corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

//go:build integration

package outriggerdev

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// get fetches http://addr/ from the local address from ("" for any).
func get(addr, from string) (string, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// nodesAnswering counts answers per node over n requests.
func nodesAnswering(addr string, n int) map[string]int {
	seen := map[string]int{}
	for range n {
		body, err := get(addr, "")
		if err != nil {
			seen["error"]++
			continue
		}
		for _, node := range []string{"node-1", "node-2"} {
			if strings.Contains(body, "Hello from "+node+" ") {
				seen[node]++
			}
		}
	}
	return seen
}

// testLoadBalancers runs against `outrigger dev`: a Service created with
// kubectl gets a local VIP whose traffic reaches both simulated nodes; UDP
// works; a port added later answers; source ranges refuse other clients;
// a stopped node drops out of rotation.
func testLoadBalancers(t *testing.T, client kubernetes.Interface, kubeconfig string, sim func(args ...string)) {
	ctx := context.Background()
	kubectl := exec.Command(filepath.Join(apiserver.AssetsDir(), "kubectl"), "--kubeconfig="+kubeconfig, "create", "service", "loadbalancer", "web", "--tcp=80:8080")
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create service: %v\n%s", err, out)
	}
	var vip string
	poll.Until(t, time.Minute, "web's ingress IP", func() bool {
		s, err := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return true
	})
	if !strings.HasPrefix(vip, "127.0.203.") {
		t.Fatalf("VIP %s is not from --lb-pool", vip)
	}
	poll.Until(t, 30*time.Second, "traffic through the VIP reaching both nodes", func() bool {
		seen := nodesAnswering(vip+":80", 10)
		return seen["node-1"] > 0 && seen["node-2"] > 0
	})

	// UDP and a port added live, on the same VIP.
	update := func(mutate func(*corev1.Service)) {
		t.Helper()
		s, err := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(s)
		if _, err := client.CoreV1().Services("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports,
			corev1.ServicePort{Name: "alt", Protocol: corev1.ProtocolTCP, Port: 81},
			corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	})
	poll.Until(t, 30*time.Second, "the added TCP port answering", func() bool {
		body, err := get(vip+":81", "")
		return err == nil && strings.Contains(body, "default/web port 81")
	})
	poll.Until(t, 30*time.Second, "UDP through the VIP", func() bool {
		c, err := net.Dial("udp", vip+":53")
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = c.Write([]byte("ping"))
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		return err == nil && strings.HasSuffix(string(buf[:n]), ": ping")
	})

	// Source ranges: only 127.0.0.5 may connect.
	update(func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"127.0.0.5/32"} })
	poll.Until(t, 30*time.Second, "a client outside the source ranges refused", func() bool {
		_, err := get(vip+":80", "127.0.0.6")
		return err != nil
	})
	if _, err := get(vip+":80", "127.0.0.5"); err != nil {
		t.Fatalf("a client inside the source ranges: %v", err)
	}
	update(func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = nil })

	// node-1 stops: its health check fails and only node-2 answers.
	sim("stop", "node-1")
	poll.Until(t, 30*time.Second, "only node-2 answering after node-1 stopped", func() bool {
		seen := nodesAnswering(vip+":80", 8)
		return seen["node-2"] == 8
	})
	sim("start", "node-1")
	poll.Until(t, 30*time.Second, "node-1 back in rotation", func() bool {
		return nodesAnswering(vip+":80", 10)["node-1"] > 0
	})
}

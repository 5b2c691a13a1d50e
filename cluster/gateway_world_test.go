package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// The Gateway the edge tests attack, as a tenant of a shared cluster would
// write it: one Gateway of the local provider's class with HTTP, HTTPS,
// TCP and UDP listeners, its settings from a parametersRef ConfigMap, and
// routes to agnhost netexec (HTTP on 8080, UDP on 8081) on both nodes.
const (
	edgeGateway = "edge"
	edgeHost    = "edge.example"
	edgeHTTP    = 80
	edgeHTTPS   = 443
	edgeTCP     = 9000
	edgeUDP     = 9001
	// edgeHeaderTimeout is the Gateway's requestHeaderTimeout: slowloris
	// connections end after it.
	edgeHeaderTimeout = 3 * time.Second
	// edgeStreamIdle is its streamIdleTimeout: a client that stops
	// reading holds its request no longer.
	edgeStreamIdle = 10 * time.Second
)

func edgeManifest() string {
	return fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata:
  name: edge-params
  namespace: default
  labels: {gateway.outrigger.dev/parameters: "true"}
data:
  requestHeaderTimeout: %s
  streamIdleTimeout: %s
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: echo}}}
      containers:
      - name: agnhost
        image: outrigger.local/agnhost:%s
        imagePullPolicy: Never
        args: [netexec, --http-port=8080, --udp-port=8081]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  selector: {app: echo}
  ports:
  - {name: http, port: 8080, protocol: TCP}
  - {name: udp, port: 8081, protocol: UDP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: %s, namespace: default}
spec:
  gatewayClassName: %s
  infrastructure:
    parametersRef: {group: "", kind: ConfigMap, name: edge-params}
  listeners:
  - {name: http, port: %d, protocol: HTTP}
  - name: https
    port: %d
    protocol: HTTPS
    hostname: %s
    tls: {certificateRefs: [{name: edge-cert}]}
  - {name: tcp, port: %d, protocol: TCP}
  - {name: udp, port: %d, protocol: UDP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: public, namespace: default}
spec:
  parentRefs:
  - {name: %s, sectionName: http}
  - {name: %s, sectionName: https}
  rules:
  - matches: [{path: {type: PathPrefix, value: /public}}]
    backendRefs: [{name: echo, port: 8080}]
  - matches: [{path: {type: Exact, value: /echo}}]
    backendRefs: [{name: echo, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: tcp, namespace: default}
spec:
  parentRefs: [{name: %s, sectionName: tcp}]
  rules: [{backendRefs: [{name: echo, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: udp, namespace: default}
spec:
  parentRefs: [{name: %s, sectionName: udp}]
  rules: [{backendRefs: [{name: echo, port: 8081}]}]
`, edgeHeaderTimeout, edgeStreamIdle, apiserver.KubernetesVersion, edgeGateway, gateway.ClassNameFor("local", ""),
		edgeHTTP, edgeHTTPS, edgeHost, edgeTCP, edgeUDP, edgeGateway, edgeGateway, edgeGateway, edgeGateway)
}

// edgeWorld is the running Gateway: its address and what reaches it.
type edgeWorld struct {
	c   *Cluster
	cl  client.Client
	vip string
	// ca signs the listener's certificates; a client trusting it checks
	// which one is served.
	ca *testcert.CA
}

// startEdgeWorld creates the Gateway's objects and waits until the
// Gateway is Programmed with an address and a request through it is
// answered by a backend.
func startEdgeWorld(ctx context.Context, t *testing.T, c *Cluster) *edgeWorld {
	t.Helper()
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := &edgeWorld{c: c, cl: cl, ca: testcert.NewCA(t, "edge")}
	certPEM, keyPEM := w.ca.IssueServer(t, []string{edgeHost})
	if _, err := c.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-cert", Namespace: "default"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(edgeManifest()), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := cl.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		gw := w.gateway(ctx)
		if gw == nil || !conditionTrue(gw, "Programmed") {
			return false, c.anyExited()
		}
		addrs, _, _ := unstructured.NestedSlice(gw.Object, "status", "addresses")
		if len(addrs) == 0 {
			return false, nil
		}
		w.vip, _, _ = unstructured.NestedString(addrs[0].(map[string]any), "value")
		return w.vip != "", nil
	}); err != nil {
		t.Fatalf("Gateway %s not Programmed with an address: %v (status %v)", edgeGateway, err, w.gateway(ctx))
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		code, _, err := w.get(ctx, "/public/ready")
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("no answer through the Gateway at %s: %v", w.vip, err)
	}
	return w
}

func (w *edgeWorld) gateway(ctx context.Context) *unstructured.Unstructured {
	gw := &unstructured.Unstructured{}
	gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
	if err := w.cl.Get(ctx, types.NamespacedName{Namespace: "default", Name: edgeGateway}, gw); err != nil {
		return nil
	}
	return gw
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			gen, _, _ := unstructured.NestedInt64(m, "observedGeneration")
			return gen == u.GetGeneration()
		}
	}
	return false
}

// dial opens a connection from the harness namespace, where a client of
// the Gateway's load balancer stands.
func (w *edgeWorld) dial(ctx context.Context, network string, port int) (net.Conn, error) {
	return dialInNetns(ctx, "/var/run/netns/"+harnessNS, network, net.JoinHostPort(w.vip, strconv.Itoa(port)))
}

// get makes one request on a new connection, as a client that behaves
// well does, and says how long the answer took.
func (w *edgeWorld) get(ctx context.Context, path string) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", w.vip, path), nil)
	resp, err := HarnessHTTPClient().Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, time.Since(start), err
}

// raw writes a request as bytes on a new connection and reads the
// statuses of the responses that come back until the connection closes.
func (w *edgeWorld) raw(ctx context.Context, req string) ([]int, error) {
	conn, err := w.dial(ctx, "tcp", edgeHTTP)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = io.WriteString(conn, req) }()
	br := bufio.NewReader(conn)
	var codes []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return codes, fmt.Errorf("the connection was still open after 20 s: %w", err)
			}
			return codes, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.Close {
			return codes, nil
		}
	}
}

// dataPlanePIDs are the host's process IDs of the Gateway's data plane
// pods (their processes run in the nodes' mount and network namespaces,
// in the host's PID namespace).
func dataPlanePIDs(t *testing.T) []int {
	t.Helper()
	want := "--secret=" + gateway.DataPlaneName("default", edgeGateway)
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(cmd, "\x00")), "\x00")
		if len(args) > 1 && args[1] == "gateway-dataplane" && strings.Contains(string(cmd), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procField is a field of /proc/PID/status or /proc/PID/limits: the first
// line starting with prefix, split on white space after it.
func procField(pid int, file, prefix string) []string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// peakRSS is the largest resident set a process has had (VmHWM), in bytes.
func peakRSS(pid int) int64 {
	f := procField(pid, "status", "VmHWM:")
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.ParseInt(f[0], 10, 64)
	return kb << 10
}

// edgeTLS is a client configuration that trusts ca and names the
// listener's host.
func edgeTLS(ca *testcert.CA) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	return &tls.Config{RootCAs: pool, ServerName: edgeHost, MinVersion: tls.VersionTLS12}
}

// leafDER is the certificate of a PEM chain's first block.
func leafDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	return b.Bytes
}

package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// TestGatewayEdge attacks a Gateway on the real cluster as the internet and
// a tenant would: its data plane pods from Outrigger's image behind the
// local provider's load balancer, kube-proxy and real pods as backends.
// Each attack is checked for what it must cost its sender (refused, cut
// off, evicted) while a client behaving well sends requests on new
// connections; every one of them must be answered, and the data plane must
// stay inside its memory limit without a restart. Then the Gateway is
// changed under 500 requests a second, none of which may fail
// (gateway_rollout_test.go).
//
// The table of the good client's latency during each attack, against the
// same client's on the idle Gateway, is logged (and written to
// OUTRIGGER_EDGE_REPORT when set): it is the suite's figure, not an
// assertion, as two cores shared by the cluster, the attack and the client
// time nothing reliably.
func TestGatewayEdge(t *testing.T) {
	withCluster(t, false, func(ctx context.Context, c *Cluster) {
		w := startEdgeWorld(ctx, t, c)
		report := checkEdgeAttacks(ctx, t, w)
		report = append(report, checkNoRequestLostToChanges(ctx, t, w)...)
		t.Log("\n" + strings.Join(report, "\n"))
		if f := os.Getenv("OUTRIGGER_EDGE_REPORT"); f != "" {
			if err := os.WriteFile(f, []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
}

// edgeAttack is one hostile use of the Gateway. start puts it in place and
// returns once it is (or, for a burst, once it is done); stop ends it and
// says what it cost its sender that it should not have.
type edgeAttack struct {
	name string
	// cost is what its checks hold it to, for the report.
	cost  string
	start func(ctx context.Context, w *edgeWorld) (stop func() error, err error)
}

// goodRequests is how many requests the well-behaved client sends during
// each attack, one at a time, each on a new connection.
const goodRequests = 30

// goodClient sends goodRequests requests and returns their median time and
// the failures.
func (w *edgeWorld) goodClient(ctx context.Context) (time.Duration, []string) {
	var times []time.Duration
	var failed []string
	for i := range goodRequests {
		code, d, err := w.get(ctx, "/public/good-"+strconv.Itoa(i))
		switch {
		case err != nil:
			failed = append(failed, err.Error())
		case code != http.StatusOK:
			failed = append(failed, fmt.Sprintf("status %d", code))
		default:
			times = append(times, d)
		}
	}
	if len(times) == 0 {
		return 0, failed
	}
	slices.Sort(times)
	return times[len(times)/2], failed
}

func checkEdgeAttacks(ctx context.Context, t *testing.T, w *edgeWorld) []string {
	base, failed := w.goodClient(ctx)
	if len(failed) > 0 {
		t.Fatalf("the idle Gateway failed %d of %d requests: %v", len(failed), goodRequests, failed)
	}
	report := []string{
		"| attack | what it cost its sender | good client's requests answered | good client's median (ms) | × idle |",
		"| --- | --- | ---: | ---: | ---: |",
		fmt.Sprintf("| none (idle) | — | %d/%d | %.1f | 1.0 |", goodRequests, goodRequests, ms(base)),
	}
	for _, a := range edgeAttacks() {
		stop, err := a.start(ctx, w)
		if err != nil {
			t.Errorf("%s: %v", a.name, err)
			continue
		}
		median, failed := w.goodClient(ctx)
		cost := stop()
		if cost != nil {
			t.Errorf("%s: %v", a.name, cost)
		}
		if len(failed) > 0 {
			t.Errorf("%s: the good client failed %d of %d requests: %v", a.name, len(failed), goodRequests, failed)
		}
		report = append(report, fmt.Sprintf("| %s | %s | %d/%d | %.1f | %.1f |", a.name, a.cost,
			goodRequests-len(failed), goodRequests, ms(median), float64(median)/float64(base)))
	}
	checkDataPlaneHeld(ctx, t, w)
	return report
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func edgeAttacks() []edgeAttack {
	return []edgeAttack{
		{"path traversal and encodings", "matched as normalized: `..`, `%2e%2e` reach no other route; `%2F` redirected", pathAttack},
		{"request smuggling", "CL+TE read as chunked, the smuggled request answered 404 by the data plane; two Content-Lengths 400", smugglingAttack},
		{"header flood (200 × 70 KiB)", "431 each", headerFlood},
		{"slowloris (1,000 connections)", "every connection closed by the header timeout (3 s)", slowloris},
		{"slow readers (10, unread)", "each one's writes stall once the buffers are full; only they wait", slowReaders},
		{"10,000 idle connections", "every one closed (the header timeout; at the limit the oldest idle first)", idleConnections},
		{"UDP source flood (5,000 sources)", "a new source answered after it", udpFlood},
	}
}

func done() error { return nil }

// pathAttack reaches for /admin through the /public route's prefix; only
// /public/... is routed, so whatever normalizes outside it is the data
// plane's own 404, never the backend's answer.
func pathAttack(ctx context.Context, w *edgeWorld) (func() error, error) {
	var wrong []string
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/public/../admin", http.StatusNotFound},
		{"/public/%2e%2e/admin", http.StatusNotFound},
		{"/public/%2E%2E/admin", http.StatusNotFound},
		{"/public/./../admin", http.StatusNotFound},
		{"/public/.%2e/admin", http.StatusNotFound},
		{"/public%2F..%2Fadmin", http.StatusTemporaryRedirect},
		{"/public/a/../b", http.StatusOK},
		{"/public//b", http.StatusOK},
		{"/admin", http.StatusNotFound},
	} {
		codes, err := w.raw(ctx, "GET "+tc.path+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		if err != nil || len(codes) != 1 || codes[0] != tc.want {
			wrong = append(wrong, fmt.Sprintf("%s: %v %v, want %d", tc.path, codes, err, tc.want))
		}
	}
	if len(wrong) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(wrong, "; "))
	}
	return done, nil
}

// smugglingAttack hides a second request in a first one's body two ways.
func smugglingAttack(ctx context.Context, w *edgeWorld) (func() error, error) {
	var wrong []string
	for _, tc := range []struct {
		name, req string
		codes     []int
	}{
		{"CL and TE", "POST /public/x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
			[]int{http.StatusOK, http.StatusNotFound}},
		{"two Content-Lengths", "POST /public/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
			[]int{http.StatusBadRequest}},
	} {
		codes, err := w.raw(ctx, tc.req)
		if err != nil || !slices.Equal(codes, tc.codes) {
			wrong = append(wrong, fmt.Sprintf("%s: %v %v, want %v", tc.name, codes, err, tc.codes))
		}
	}
	if len(wrong) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(wrong, "; "))
	}
	return done, nil
}

// background runs n attackers at once until stop or until each has done
// its bounded work; stop waits for them and returns the first error.
func background(n int, attacker func(i int, quit <-chan struct{}) error) func() error {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := attacker(i, quit); err != nil {
				mu.Lock()
				first = cmpOr(first, err)
				mu.Unlock()
			}
		}()
	}
	return func() error {
		close(quit)
		wg.Wait()
		return first
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// headerFlood sends requests with 70 KiB of headers, over the 60 KiB
// limit, from 200 connections at once, for as long as the good client
// measures (each attacker at most 50 requests).
func headerFlood(ctx context.Context, w *edgeWorld) (func() error, error) {
	req := "GET /public/x HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Flood: "+strings.Repeat("f", 690)+"\r\n", 100) + "\r\n"
	var answered atomic.Int64
	stop := background(200, func(_ int, quit <-chan struct{}) error {
		for range 50 {
			select {
			case <-quit:
				return nil
			default:
			}
			codes, err := w.raw(ctx, req)
			if err == nil && len(codes) > 0 && codes[0] != http.StatusRequestHeaderFieldsTooLarge {
				return fmt.Errorf("a 70 KiB header answered %v, want 431", codes)
			}
			if len(codes) > 0 {
				answered.Add(1)
			}
		}
		return nil
	})
	return func() error {
		if err := stop(); err != nil {
			return err
		}
		if answered.Load() == 0 {
			return fmt.Errorf("no flooded request was answered 431")
		}
		return nil
	}, nil
}

// slowloris opens 1,000 connections that send a request's headers a byte
// every half second; the Gateway's header timeout must close each.
func slowloris(ctx context.Context, w *edgeWorld) (func() error, error) {
	conns, err := w.dialMany(ctx, 1000, edgeHTTP)
	if err != nil {
		return nil, err
	}
	stopWriting := background(len(conns), func(i int, quit <-chan struct{}) error {
		c := conns[i]
		if _, err := io.WriteString(c, "GET /public/x HTTP/1.1\r\nHost: a\r\n"); err != nil {
			return nil
		}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for range 120 { // a minute at most
			select {
			case <-quit:
				return nil
			case <-tick.C:
			}
			if _, err := c.Write([]byte("X")); err != nil {
				return nil // closed by the Gateway
			}
		}
		return nil
	})
	return func() error {
		defer closeAll(conns)
		open := stillOpen(conns, 45*time.Second)
		_ = stopWriting()
		if open > 0 {
			return fmt.Errorf("%d of %d slowloris connections were still open after 45 s (header timeout %s)", open, len(conns), edgeHeaderTimeout)
		}
		return nil
	}, nil
}

// stillOpen reads each connection until the Gateway closes it, and counts
// those still open after within.
func stillOpen(conns []net.Conn, within time.Duration) int {
	deadline := time.Now().Add(within)
	var open atomic.Int64
	next := atomic.Int64{}
	_ = background(100, func(_ int, _ <-chan struct{}) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(conns) {
				return nil
			}
			_ = conns[i].SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, conns[i])
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open.Add(1)
			}
		}
	})()
	return int(open.Load())
}

// slowReaders pipeline requests for 32 KiB answers on 10 connections and
// never read one: the data plane's writes to them stall, then its reads of
// their requests, then their own writes. The good client is measured once
// every one has stalled, while the data plane holds them.
func slowReaders(ctx context.Context, w *edgeWorld) (func() error, error) {
	conns, err := w.dialMany(ctx, 10, edgeHTTP)
	if err != nil {
		return nil, err
	}
	req := "GET /echo?msg=" + strings.Repeat("r", 32<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n"
	var stalled atomic.Int64
	_ = background(len(conns), func(i int, _ <-chan struct{}) error {
		c := conns[i]
		for range 512 { // 16 MiB at most
			_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.WriteString(c, req); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					stalled.Add(1)
				}
				return nil
			}
		}
		return nil
	})()
	if n := stalled.Load(); n < int64(len(conns)) {
		closeAll(conns)
		return nil, fmt.Errorf("%d of %d connections stalled after 16 MiB of requests unread", n, len(conns))
	}
	return func() error {
		closeAll(conns)
		return nil
	}, nil
}

// idleConnections opens 10,000 connections that send nothing, more than
// the data plane's limit (4,096 a pod at 256 MiB), holds them while the
// good client is measured, and then requires the Gateway to close every
// one: the header timeout ends a connection that sends no request, and at
// the limit the oldest idle one makes room first.
func idleConnections(ctx context.Context, w *edgeWorld) (func() error, error) {
	conns, err := w.dialMany(ctx, 10000, edgeHTTP)
	if err != nil {
		return nil, err
	}
	return func() error {
		defer closeAll(conns)
		if open := stillOpen(conns, 45*time.Second); open > 0 {
			return fmt.Errorf("%d of %d idle connections were still open after 45 s (header timeout %s)", open, len(conns), edgeHeaderTimeout)
		}
		return nil
	}, nil
}

// udpFlood sends a datagram from each of 5,000 source ports (a flow each)
// to the UDP listener, then checks that a new source is still answered.
func udpFlood(ctx context.Context, w *edgeWorld) (func() error, error) {
	stop := background(50, func(_ int, _ <-chan struct{}) error {
		for range 100 {
			c, err := w.dial(ctx, "udp", edgeUDP)
			if err != nil {
				return err
			}
			_, _ = c.Write([]byte("hostname"))
			c.Close()
		}
		return nil
	})
	if err := stop(); err != nil {
		return nil, err
	}
	return func() error {
		// A datagram may be lost on its way: a few tries, each waiting
		// for its answer.
		for range 5 {
			c, err := w.dial(ctx, "udp", edgeUDP)
			if err != nil {
				return err
			}
			_, _ = c.Write([]byte("hostname"))
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			c.Close()
			if err == nil && n > 0 {
				return nil
			}
		}
		return fmt.Errorf("a new UDP source got no answer after the flood")
	}, nil
}

// dialMany opens n connections to port, 100 at a time.
func (w *edgeWorld) dialMany(ctx context.Context, n, port int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	next := atomic.Int64{}
	stop := background(100, func(_ int, _ <-chan struct{}) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			c, err := w.dial(ctx, "tcp", port)
			if err != nil {
				return fmt.Errorf("connection %d of %d: %w", i, n, err)
			}
			conns[i] = c
		}
	})
	if err := stop(); err != nil {
		closeAll(conns)
		return nil, err
	}
	return conns, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// checkDataPlaneHeld: after every attack, the data plane's processes
// stayed under their memory limit, have descriptors to spare beyond their
// connection limit (so no client can exhaust them: the connection limit
// is reached first), and their pods never restarted.
func checkDataPlaneHeld(ctx context.Context, t *testing.T, w *edgeWorld) {
	t.Helper()
	const memLimit = 256 << 20 // the Deployment's limit (internal/controllers/gateway/build.go)
	const connLimit = 4096     // the data plane's at that limit (dataplane.limitsFor)
	pids := dataPlanePIDs(t)
	if len(pids) == 0 {
		t.Fatal("no data plane process found")
	}
	for _, pid := range pids {
		if rss := peakRSS(pid); rss == 0 || rss >= memLimit {
			t.Errorf("data plane process %d: peak RSS %d bytes, limit %d", pid, rss, memLimit)
		} else {
			t.Logf("data plane process %d: peak RSS %.1f MiB of %d MiB", pid, float64(rss)/(1<<20), memLimit>>20)
		}
		f := procField(pid, "limits", "Max open files")
		if len(f) == 0 {
			t.Errorf("data plane process %d: no descriptor limit read", pid)
			continue
		}
		// Each client connection holds one descriptor and its backend
		// connection another.
		if soft, err := strconv.Atoi(f[0]); err != nil || soft < 2*connLimit+256 {
			t.Errorf("data plane process %d: %q open files allowed, fewer than its connections may need (%d)", pid, f[0], 2*connLimit+256)
		}
	}
	pods, err := w.c.Client.CoreV1().Pods(gatewayNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := gateway.DataPlaneName("default", edgeGateway)
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, prefix) {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Errorf("data plane pod %s restarted %d times (last: %v)", p.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
			}
		}
	}
}

// gatewayNamespace is where Outrigger makes the data planes
// (--gateway-namespace, deploy/rbac-gateway.yaml).
const gatewayNamespace = "outrigger-gateways"

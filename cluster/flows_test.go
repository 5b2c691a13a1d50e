package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// checkFlowsStayOnOneNode asserts what a cloud's network load balancer
// gives every connection: all its packets reach one node, also while the
// network's routes change (as they do whenever a load balancer comes or
// goes). Each connection is closed by the client first, so its last ACK
// and any RST are sent by the client's kernel from TIME_WAIT, without the
// socket; a node that saw the connection but not that ACK keeps it in
// LAST_ACK, and a later connection from the same port meets that state
// and hangs. So every flow must be in TIME_WAIT on exactly one node.
func checkFlowsStayOnOneNode(ctx context.Context, t *testing.T, c *Cluster, vip string) {
	t.Helper()
	// Another VIP's route changing all along, on the nodes in turn.
	spare := netip.MustParseAddr("198.18.100.254")
	var hops []string
	for _, n := range c.nodes {
		hops = append(hops, n.IP)
	}
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for i := 0; churnCtx.Err() == nil && i < 10000; i++ {
			_ = c.router.setRoute(churnCtx, spare, hops[:1+i%len(hops)])
			_ = c.router.setRoute(churnCtx, spare, nil)
		}
	}()
	const conns = 300
	ports := map[int]bool{}
	for range conns {
		port, err := oneRequest(ctx, vip)
		if err != nil {
			stopChurn()
			churn.Wait()
			t.Fatalf("a request through VIP %s: %v", vip, err)
		}
		ports[port] = true
	}
	stopChurn()
	churn.Wait()
	_ = c.router.setRoute(ctx, spare, nil)

	var problems []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		seen := map[int][]string{} // client port -> "node:state"
		for _, n := range c.nodes {
			entries, err := conntrackFrom(ctx, n.Name, vip)
			if err != nil {
				return false, err
			}
			for port, state := range entries {
				if ports[port] {
					seen[port] = append(seen[port], n.Name+":"+state)
				}
			}
		}
		problems = problems[:0]
		for port := range ports {
			if s := seen[port]; len(s) != 1 || !strings.HasSuffix(s[0], ":TIME_WAIT") {
				problems = append(problems, fmt.Sprintf("port %d: %v", port, s))
			}
		}
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Errorf("of %d connections through VIP %s, %d were not in TIME_WAIT on exactly one node (%v): %v", len(ports), vip, len(problems), err, problems)
	}
}

// oneRequest makes one HTTP request to vip:80 from the harness namespace on
// a connection it closes first, and returns the connection's local port.
func oneRequest(ctx context.Context, vip string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := dialInNetns(ctx, "/var/run/netns/"+harnessNS, "tcp", net.JoinHostPort(vip, "80"))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+vip+"\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return conn.LocalAddr().(*net.TCPAddr).Port, nil
}

// conntrackFrom lists a node's conntrack entries of connections from
// ExternalClientIP to vip: client port -> state.
func conntrackFrom(ctx context.Context, node, vip string) (map[int]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node, "conntrack", "-L", "-p", "tcp", "--orig-src", ExternalClientIP, "--orig-dst", vip).Output()
	if err != nil {
		return nil, fmt.Errorf("conntrack in %s: %w", node, err)
	}
	entries := map[int]string{}
	for _, line := range strings.Split(string(out), "\n") {
		// tcp 6 119 TIME_WAIT src=... dst=... sport=P dport=80 src=...
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		for _, kv := range f[4:] {
			if p, ok := strings.CutPrefix(kv, "sport="); ok {
				var port int
				if _, err := fmt.Sscan(p, &port); err == nil {
					entries[port] = f[3]
				}
				break
			}
		}
	}
	return entries, nil
}

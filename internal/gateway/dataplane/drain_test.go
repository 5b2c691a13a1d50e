package dataplane

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// A version of the programming that fails to apply (its port is taken for a
// moment) is tried again without a newer version arriving, and applies once
// the port is free.
func TestAFailedApplyIsRetried(t *testing.T) {
	var l loopback
	o := l.options()
	listen := o.ListenTCP
	var busy atomic.Int64
	busy.Store(2) // the first two tries find the port taken
	o.ListenTCP = func(port int32) (net.Listener, error) {
		if busy.Add(-1) >= 0 {
			return nil, errors.New("address already in use")
		}
		return listen(port)
	}
	p := New(o)
	t.Cleanup(p.Close)
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: echo(t, "a"), Weight: 1}}}}}}}}}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	latest := make(chan *corev1.Secret, 1)
	latest <- &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Data: map[string][]byte{ConfigKey: data}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outcomes := make(chan error, 10)
	go applyLoop(ctx, latest, p, func(err error) { outcomes <- err })
	for i := range 3 {
		select {
		case err := <-outcomes:
			if (err == nil) != (i == 2) {
				t.Fatalf("try %d: %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("try %d never came", i+1)
		}
	}
	resp, err := http.Get("http://" + l.at(t, "tcp/80") + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// Draining lets a request in flight finish while the port takes no new
// connection.
func TestDrainLetsRequestsInFlightFinish(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		_, _ = io.WriteString(w, "finished")
	}))
	t.Cleanup(srv.Close)
	p, addr := edgeProxy(t, Limits{}, Rule{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: strings.TrimPrefix(srv.URL, "http://"), Weight: 1}}})
	body := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			body <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body <- string(b)
	}()
	<-arrived
	drained := make(chan struct{})
	go func() {
		p.Drain(context.Background())
		close(drained)
	}()
	// The listener closes first: wait until a new connection is refused.
	poll.Until(t, 20*time.Second, "the port to stop accepting", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	if got := <-body; got != "finished" {
		t.Fatalf("the request in flight got %q", got)
	}
	<-drained
}

// The connection limit follows the memory limit: a 256 MiB pod holds 4,096
// connections, a tiny one still 256, a process without a limit the default.
func TestConnectionLimitFollowsMemory(t *testing.T) {
	for _, tc := range []struct {
		mem  int64
		want int
	}{{256 << 20, 4096}, {1 << 20, 256}, {math.MaxInt64, 16384}} {
		if got := limitsFor(tc.mem).MaxConnections; got != tc.want {
			t.Errorf("memory limit %d: %d connections, want %d", tc.mem, got, tc.want)
		}
	}
}

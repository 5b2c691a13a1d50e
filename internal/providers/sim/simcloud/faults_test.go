package simcloud

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestRetryAfterHint(t *testing.T) {
	for _, tc := range []struct {
		retryAfter time.Duration
		want       string
	}{
		{0, "1"},
		{300 * time.Millisecond, "1"},
		{7 * time.Second, "7"},
		{7500 * time.Millisecond, "8"},
	} {
		c := New("")
		srv := httptest.NewServer(c.Handler())
		c.SetSettings(Settings{RateLimit: 0.001, RateBurst: 1, RetryAfter: Duration{Duration: tc.retryAfter}})
		var got []string
		for range 2 {
			resp, err := http.Get(srv.URL + "/v1/instances")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got = append(got, resp.Status+" "+resp.Header.Get("Retry-After"))
		}
		srv.Close()
		if want := "429 Too Many Requests " + tc.want; got[0] != "200 OK " || got[1] != want {
			t.Errorf("retryAfter %v: got %q, want [200 OK, %q]", tc.retryAfter, got, want)
		}
	}
}

// A call under HangFor is not answered while the hang lasts: the client
// gives up first (here when the cloud has counted the call).
func TestHangForHoldsCalls(t *testing.T) {
	c := New("")
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	c.SetSettings(Settings{HangFor: Duration{Duration: time.Hour}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for c.Calls().Total == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/instances", nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("answered %s during the hang", resp.Status)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the client's cancellation", err)
	}
	// Lifted, calls are answered again.
	c.SetSettings(Settings{})
	resp, err = http.Get(srv.URL + "/v1/instances")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the hang: %v %v", resp, err)
	}
	resp.Body.Close()
}

// HangObjects holds the calls on the objects it names, until the client
// gives up, and answers every other call, the list included.
func TestHangObjectsHoldsOnlyTheirCalls(t *testing.T) {
	c := New("")
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	for _, name := range []string{"hung", "free"} {
		if _, err := c.PutLoadBalancer(name, LoadBalancerSpec{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.SetSettings(Settings{HangObjects: []string{"loadbalancer/hung"}})
	call := func(ctx context.Context, method, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		return http.DefaultClient.Do(req)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/loadbalancers/free"}, {http.MethodGet, "/v1/loadbalancers"}, {http.MethodGet, "/v1/instances"},
	} {
		resp, err := call(context.Background(), tc.method, tc.path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s during the hang of another object: %v %v", tc.method, tc.path, resp, err)
		}
		resp.Body.Close()
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/loadbalancers/hung"}, {http.MethodPut, "/v1/loadbalancers/hung/backends"}, {http.MethodDelete, "/v1/loadbalancers/hung"},
	} {
		before := c.Calls().Total
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			// The client gives up once the cloud has the call.
			for c.Calls().Total == before {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		resp, err := call(ctx, tc.method, tc.path)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s %s answered %s during its hang", tc.method, tc.path, resp.Status)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s %s: got %v, want the client's cancellation", tc.method, tc.path, err)
		}
	}
	if _, ok := c.GetLoadBalancer("hung"); !ok {
		t.Fatal("a held delete deleted the load balancer")
	}
	// Lifted, the object's calls are answered again.
	c.SetSettings(Settings{})
	resp, err := call(context.Background(), http.MethodGet, "/v1/loadbalancers/hung")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the hang: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A load balancer PUT whose client gives up during the cloud's latency is
// not carried out afterwards: it would otherwise land after whatever the
// client did next (a delete, say) and bring back what that removed.
func TestAbandonedPutIsNotApplied(t *testing.T) {
	c := New("")
	srv := httptest.NewServer(c.Handler())
	c.SetSettings(Settings{Latency: Duration{Duration: 2 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for c.Calls().Total == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	cl := NewClient(srv.URL, time.Minute, 0)
	if _, err := cl.PutLoadBalancer(ctx, "lb", LoadBalancerSpec{Listeners: []Listener{{Protocol: "TCP", Port: 80, NodePort: 30080}}}, nil); err == nil {
		t.Fatal("PUT answered before its latency")
	}
	// Close waits for the handler: it noticed the caller left, or it sat
	// out the latency and went on.
	srv.Close()
	if lbs := c.LoadBalancers(); len(lbs) != 0 {
		t.Fatalf("a PUT given up by its client was applied: %+v", lbs)
	}
}

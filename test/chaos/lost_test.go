package chaos

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// While losing, a write reaches the API server and the client gets an
// error; reads pass; and once lifted, writes are answered again.
func TestLossyProxyLosesAnswersOfCommittedWrites(t *testing.T) {
	var writes atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writes.Add(1)
		}
		_, _ = io.WriteString(w, `{"kind":"Node"}`)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := newLossyProxy(u, http.DefaultTransport, 1)
	srv := httptest.NewServer(p)
	defer srv.Close()
	do := func(method string) (int, error) {
		req, _ := http.NewRequest(method, srv.URL+"/api/v1/nodes/n", strings.NewReader("{}"))
		// A fresh connection each time: a closed one is not reused.
		req.Close = true
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.ReadAll(resp.Body)
		return resp.StatusCode, nil
	}

	p.lose(1)
	var lost504, closed int
	for i := range 20 {
		before := writes.Load()
		code, err := do(http.MethodPatch)
		if writes.Load() != before+1 {
			t.Fatalf("write %d did not reach the API server", i)
		}
		switch {
		case err != nil:
			closed++
		case code == http.StatusGatewayTimeout:
			lost504++
		default:
			t.Fatalf("write %d answered %d while every answer is lost", i, code)
		}
	}
	if lost504 == 0 || closed == 0 {
		t.Errorf("lost answers: %d as 504, %d as a closed connection; want both kinds", lost504, closed)
	}
	if code, err := do(http.MethodGet); err != nil || code != http.StatusOK {
		t.Errorf("a read while losing: %d %v", code, err)
	}
	if lost, committed := p.counts(); lost != 20 || committed != 20 {
		t.Errorf("counted %d lost, %d committed; want 20, 20", lost, committed)
	}

	p.lose(0)
	if code, err := do(http.MethodPatch); err != nil || code != http.StatusOK {
		t.Errorf("a write once lifted: %d %v", code, err)
	}
}

func TestResourceOfPath(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/nodes/n1":                                             "nodes",
		"/api/v1/nodes/n1/status":                                      "nodes/status",
		"/api/v1/namespaces/chaos/services/svc-1/status":               "services/status",
		"/api/v1/namespaces/chaos/events":                              "events",
		"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x": "leases",
		"/apis/events.k8s.io/v1/namespaces/chaos/events":               "events",
	} {
		if got := resource(path); got != want {
			t.Errorf("resource(%q) = %q, want %q", path, got, want)
		}
	}
}

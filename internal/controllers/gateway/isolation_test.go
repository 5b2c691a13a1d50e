package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// isolationWorld has four HTTP listeners on one port, from no hostname to an
// exact one, and one route attached to each by sectionName, each route
// naming every hostname of the four: only the most specific listener that
// matches a request's host may serve it (GatewayHTTPListenerIsolation).
const isolationWorld = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {namespace: edge, name: gw, generation: 1}
spec:
  gatewayClassName: outrigger
  listeners:
  - {name: any, port: 80, protocol: HTTP}
  - {name: wild, port: 80, protocol: HTTP, hostname: "*.example.com"}
  - {name: wild-foo, port: 80, protocol: HTTP, hostname: "*.foo.example.com"}
  - {name: exact, port: 80, protocol: HTTP, hostname: abc.foo.example.com}
---
apiVersion: v1
kind: Service
metadata: {namespace: edge, name: web}
spec:
  clusterIP: 198.18.0.10
  ports: [{port: 80, protocol: TCP}]
`

// isolationRoutes are the four routes, one per listener.
func init() {
	for _, section := range []string{"any", "wild", "wild-foo", "exact"} {
		isolationRoutes += fmt.Sprintf(`---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: edge, name: to-%[1]s, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw, sectionName: %[1]s}]
  hostnames: [bar.com, "*.example.com", "*.foo.example.com", abc.foo.example.com]
  rules: [{matches: [{path: {type: PathPrefix, value: /%[1]s}}], backendRefs: [{name: web, port: 80}]}]
`, section)
	}
}

var isolationRoutes string

// A request is served only by the routes of the most specific listener of
// its port matching its host: each host answers on its own listener's path
// and 404 on the others', through the data plane itself.
func TestListenerIsolation(t *testing.T) {
	w := worldOf(t, "isolation", []byte(isolationWorld+isolationRoutes))
	res := compile(w)
	// The backend is the data plane's to reach: point it at a local
	// server that says which path it got.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	backend := strings.TrimPrefix(srv.URL, "http://")
	for pi := range res.config.Ports {
		for hi := range res.config.Ports[pi].Hosts {
			for ri := range res.config.Ports[pi].Hosts[hi].Rules {
				for bi := range res.config.Ports[pi].Hosts[hi].Rules[ri].Backends {
					res.config.Ports[pi].Hosts[hi].Rules[ri].Backends[bi].Address = backend
				}
			}
		}
	}
	var addr string
	p := dataplane.New(dataplane.Options{ListenTCP: func(int32) (net.Listener, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			addr = l.Addr().String()
		}
		return l, err
	}})
	t.Cleanup(p.Close)
	if err := p.Apply(&res.config); err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{
		"bar.com":             "any",
		"bar.example.com":     "wild",
		"bar.foo.example.com": "wild-foo",
		"abc.foo.example.com": "exact",
	}
	for host, want := range owner {
		for _, section := range []string{"any", "wild", "wild-foo", "exact"} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/"+section, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			wantCode := http.StatusNotFound
			if section == want {
				wantCode = http.StatusOK
			}
			if resp.StatusCode != wantCode {
				t.Errorf("%s /%s: %d, want %d (its listener is %s)", host, section, resp.StatusCode, wantCode, want)
			}
		}
	}
}

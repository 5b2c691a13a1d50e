package simcloud

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequests feeds the sim cloud's own HTTP API arbitrary requests (package
// awsemu fuzzes the AWS APIs served over it): each is answered, a malformed
// one with a 4xx saying what is wrong, never a panic or a 5xx (the cloud
// answers 5xx only for the faults it is told to inject).
func FuzzRequests(f *testing.F) {
	for _, seed := range []struct{ method, path, body string }{
		{"POST", "/v1/instances", `{"name":"a","zone":"sim-region-1a"}`},
		{"POST", "/v1/instances", `{"name":1}`},
		{"POST", "/v1/batch/instances", `{"ids":["i-1"],"names":["a"]}`},
		{"POST", "/v1/instances/i-1/stop", ``},
		{"PUT", "/v1/loadbalancers/lb", `{"listeners":[{"protocol":"TCP","port":80,"nodePort":30080}],"requestedIP":"300.1.1.1"}`},
		{"PUT", "/v1/loadbalancers/lb/backends", `[{"node":"a","address":"x"}]`},
		{"POST", "/v1/routes", `{"name":"r","destination":"198.18.0.0/33","target":"a"}`},
		{"DELETE", "/v1/routes/r", ``},
		{"PUT", "/v1/settings", `{"latency":"-1s","rateLimit":-3}`},
	} {
		f.Add(seed.method, seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, method, path, body string) {
		// What a server would have read off the wire: a request line that
		// does not parse never reaches the handler.
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + path + " HTTP/1.1\r\nHost: sim\r\n\r\n")))
		if err != nil || !strings.HasPrefix(path, "/") {
			return
		}
		req.Body = io.NopCloser(strings.NewReader(body))
		req.ContentLength = int64(len(body))
		req.RemoteAddr = "192.0.2.1:1234"
		c := New("")
		if _, err := c.Create(CreateRequest{Name: "a"}); err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, req)
		if rec.Code >= http.StatusInternalServerError {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body)
		}
	})
}

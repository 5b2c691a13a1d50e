package console

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The console has no authentication of its own: a request naming it by a
// DNS name (a page on another site rebinding its name to this machine) is
// refused; its own addresses are served.
func TestHostGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, tc := range []struct {
		listen, host string
		want         int
	}{
		{"127.0.0.1", "127.0.0.1:8481", http.StatusOK},
		{"127.0.0.1", "localhost:8481", http.StatusOK},
		{"127.0.0.1", "evil.example:8481", http.StatusMisdirectedRequest},
		{"127.0.0.1", "127.0.0.2:8481", http.StatusMisdirectedRequest},
		{"::1", "[::1]:8481", http.StatusOK},
		{"198.18.0.5", "198.18.0.5:80", http.StatusOK},
		{"198.18.0.5", "localhost:80", http.StatusMisdirectedRequest},
		{"0.0.0.0", "198.18.0.5:80", http.StatusOK},
		{"0.0.0.0", "rebind.example", http.StatusMisdirectedRequest},
	} {
		h := hostGuard(&net.TCPAddr{IP: net.ParseIP(tc.listen), Port: 8481}, ok)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("listening on %s, Host %s: %d, want %d", tc.listen, tc.host, rec.Code, tc.want)
		}
	}
}

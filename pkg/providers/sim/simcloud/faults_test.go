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
		c.SetSettings(Settings{RateLimit: 0.001, RateBurst: 1, RetryAfter: Duration{tc.retryAfter}})
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
	c.SetSettings(Settings{HangFor: Duration{time.Hour}})
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

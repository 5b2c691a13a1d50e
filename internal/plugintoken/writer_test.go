package plugintoken

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
)

// tokenServer plays the TokenRequest API: it answers token-1, token-2, ...
// granting what was asked, or fails while fail is set.
type tokenServer struct {
	mu       sync.Mutex
	fail     bool
	requests []*authenticationv1.TokenRequest
	where    []string
}

func (s *tokenServer) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateAction)
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		req := ca.GetObject().(*authenticationv1.TokenRequest)
		s.requests = append(s.requests, req)
		s.where = append(s.where, a.GetNamespace()+"/"+ca.(k8stesting.CreateActionImpl).Name)
		if s.fail {
			return true, nil, errors.New("the API server is away")
		}
		out := req.DeepCopy()
		out.Status.Token = fmt.Sprintf("token-%d", len(s.requests))
		return true, out, nil
	})
	return c
}

func (s *tokenServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *tokenServer) setFail(fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

func readFile(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// startWriter runs a Writer of plugins/acme-plugin on the server, with a
// fake clock, until the test ends.
func startWriter(t *testing.T, s *tokenServer) (*Writer, *testclock.Fake, string) {
	t.Helper()
	dir := t.TempDir()
	clk := testclock.New(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	w, err := New(Options{
		ServiceAccount: types.NamespacedName{Namespace: "plugins", Name: "acme-plugin"},
		Dir:            dir,
		Client:         s.client().CoreV1(),
		CA:             func() ([]byte, error) { return []byte("-----BEGIN CERTIFICATE-----\nca\n"), nil },
		Clock:          clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return w, clk, dir
}

// waitForTimer waits for the writer to wait on its clock: it has acted on
// what it was given.
func waitForTimer(t *testing.T, clk *testclock.Fake) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the writer to wait for its next request", clk.HasWaiters)
}

// TestTheTokenIsWrittenAtOnceAndReplacedAt80PercentOfItsLifetime: the
// directory gets what a ServiceAccount mount holds (the token, the CA, the
// namespace) of the plugin's account, asked for an hour; the token is
// replaced once 48 minutes have passed, not before.
func TestTheTokenIsWrittenAtOnceAndReplacedAt80PercentOfItsLifetime(t *testing.T) {
	s := &tokenServer{}
	w, clk, dir := startWriter(t, s)
	poll.Until(t, 10*time.Second, "the first token", func() bool { return readFile(t, dir, TokenFile) == "token-1" })
	if ca, ns := readFile(t, dir, CAFile), readFile(t, dir, NamespaceFile); ca != "-----BEGIN CERTIFICATE-----\nca\n" || ns != "plugins" {
		t.Errorf("ca.crt %q namespace %q", ca, ns)
	}
	if fi, err := os.Stat(filepath.Join(dir, TokenFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token mode %v (%v), want 0600", fi.Mode(), err)
	}
	s.mu.Lock()
	req, where := s.requests[0], s.where[0]
	s.mu.Unlock()
	if where != "plugins/acme-plugin" || req.Spec.ExpirationSeconds == nil || *req.Spec.ExpirationSeconds != 3600 || len(req.Spec.Audiences) != 0 {
		t.Errorf("asked %s for %+v, want plugins/acme-plugin for an hour with the API server's audiences", where, req.Spec)
	}
	waitForTimer(t, clk)
	if err := w.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}

	clk.Step(47 * time.Minute)
	waitForTimer(t, clk)
	if n := s.count(); n != 1 {
		t.Fatalf("%d requests after 47 minutes, want 1", n)
	}
	clk.Step(time.Minute)
	poll.Until(t, 10*time.Second, "the second token after 48 minutes", func() bool { return readFile(t, dir, TokenFile) == "token-2" })
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 3 {
		t.Errorf("directory holds %v (%v), want the three files and no temporary one", entries, err)
	}
}

// TestAFailingRequestIsRetriedWithBackoffAndTheTokenKeptUntilItExpires:
// while the API server refuses, the token written before stays, requests
// are retried after 1s, 2s, 4s..., the replica turns unready only once
// that token has expired, and the next success replaces it.
func TestAFailingRequestIsRetriedWithBackoffAndTheTokenKeptUntilItExpires(t *testing.T) {
	s := &tokenServer{}
	failedBefore := testutil.ToFloat64(tokenRequests.WithLabelValues("failed"))
	w, clk, dir := startWriter(t, s)
	poll.Until(t, 10*time.Second, "the first token", func() bool { return readFile(t, dir, TokenFile) == "token-1" })
	waitForTimer(t, clk)
	if exp := testutil.ToFloat64(tokenExpiry.WithLabelValues()); exp != float64(clk.Now().Add(time.Hour).Unix()) {
		t.Errorf("outrigger_plugin_token_expiry_timestamp_seconds %v, want an hour from the request", exp)
	}
	s.setFail(true)
	clk.Step(48 * time.Minute)
	poll.Until(t, 10*time.Second, "a failed request", func() bool { return s.count() == 2 })
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		waitForTimer(t, clk)
		clk.Step(wait - time.Millisecond)
		waitForTimer(t, clk)
		if n := s.count(); n != 2+i {
			t.Fatalf("%d requests %s into a backoff of %s, want %d", n, wait-time.Millisecond, wait, 2+i)
		}
		clk.Step(time.Millisecond)
		poll.Until(t, 10*time.Second, fmt.Sprintf("the retry after %s", wait), func() bool { return s.count() == 3+i })
	}
	if got := readFile(t, dir, TokenFile); got != "token-1" {
		t.Errorf("token %q while failing, want token-1 kept", got)
	}
	if n := testutil.ToFloat64(tokenRequests.WithLabelValues("failed")) - failedBefore; n != 4 {
		t.Errorf("outrigger_plugin_token_requests_total{result=failed} rose by %v, want 4", n)
	}
	if err := w.Ready(); err != nil {
		t.Errorf("Ready before the token expired: %v", err)
	}
	// Past the hour: the token has expired.
	waitForTimer(t, clk)
	clk.Step(12 * time.Minute)
	poll.Until(t, 10*time.Second, "unready once the token expired", func() bool { return w.Ready() != nil })
	s.setFail(false)
	poll.Until(t, 10*time.Second, "a new token after the API server is back", func() bool {
		if clk.HasWaiters() {
			clk.Step(time.Minute)
		}
		return readFile(t, dir, TokenFile) != "token-1"
	})
	poll.Until(t, 10*time.Second, "ready again", func() bool { return w.Ready() == nil })
}

// TestNewRefusesIncompleteOptions: a writer without an account, directory,
// client or CA is refused with what is missing.
func TestNewRefusesIncompleteOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New accepted empty options")
	} else {
		t.Log(err)
	}
}

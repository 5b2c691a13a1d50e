package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// An HTTPRoute rule's retry stanza (Gateway API experimental channel,
// GEP-1731): a request the backend answers with one of the codes, that
// cannot reach the backend, or whose attempt runs out the rule's
// backendRequest timeout, is sent again after a backoff, up to attempts
// times. Where the API leaves a value to the implementation, Envoy
// Gateway's is taken, as the edge's other defaults are.
const (
	// defaultRetries is how often a request is sent again when the
	// stanza names no attempts (Envoy's num_retries default).
	defaultRetries = 2
	// defaultBackoff is the least wait before a retry when the stanza
	// names none (Envoy's base interval).
	defaultBackoff = 25 * time.Millisecond
	// maxRetries bounds what a route may ask: each retry is another
	// request to its backends and another wait for its client, so a
	// tenant's route cannot multiply a Gateway's traffic without bound.
	maxRetries = 10
	// maxRetryBody is the most of a request body kept to send again
	// (Envoy's default buffer limit is 1 MiB per request; a data plane
	// holding thousands of requests keeps less). A larger body is sent
	// once, streamed, and not retried.
	maxRetryBody = 64 << 10
	// retryDrain is the most of a retried answer read before its
	// connection is given back; more, and the connection is closed.
	retryDrain = 64 << 10
)

// retryPolicy is a rule's retry stanza, parsed once.
type retryPolicy struct {
	codes   []int
	retries int
	backoff time.Duration
	// perTry is the rule's backendRequest timeout, which bounds each
	// attempt rather than the whole exchange; zero, none.
	perTry time.Duration
}

// CheckRetry says whether the data plane can serve an HTTPRoute rule's
// retry stanza: the controller refuses the route otherwise, as for its
// timeouts.
func CheckRetry(r *gwv1.HTTPRouteRetry) error {
	_, err := parseRetry(r, 0)
	return err
}

func parseRetry(r *gwv1.HTTPRouteRetry, perTry time.Duration) (*retryPolicy, error) {
	if r == nil {
		return nil, nil
	}
	p := &retryPolicy{retries: defaultRetries, backoff: defaultBackoff, perTry: perTry}
	for _, c := range r.Codes {
		if c < 400 || c > 599 {
			return nil, fmt.Errorf("retry code %d: not between 400 and 599", c)
		}
		p.codes = append(p.codes, int(c))
	}
	if r.Attempts != nil {
		switch n := *r.Attempts; {
		case n < 1:
			return nil, fmt.Errorf("retry attempts %d: at least 1", n)
		case n > maxRetries:
			return nil, fmt.Errorf("retry attempts %d: at most %d", n, maxRetries)
		default:
			p.retries = n
		}
	}
	if r.Backoff != nil {
		d, err := time.ParseDuration(string(*r.Backoff))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("retry backoff %q: not a duration", *r.Backoff)
		}
		p.backoff = d
	}
	return p, nil
}

// wait is the pause before retry n (0 the first): the backoff doubled for
// each earlier retry, up to ten times it, with up to a quarter more of
// jitter, never less than the backoff the route asked for.
func (p *retryPolicy) wait(n int) time.Duration {
	d := p.backoff
	for i := 0; i < n && d < 10*p.backoff; i++ {
		d *= 2
	}
	d = min(d, 10*p.backoff)
	if d > 0 {
		d += rand.N(d/4 + 1)
	}
	return d
}

// retryTransport sends a request again as its rule's retry stanza says;
// a request of a rule without one goes through next once.
type retryTransport struct {
	next http.RoundTripper
	// retried counts each retry by route and why (code, connection,
	// timeout); nil counts nothing.
	retried func(route, why string)
}

func (t *retryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tg := targetOf(r.Context())
	p := tg.retry
	if p == nil {
		return t.next.RoundTrip(r)
	}
	body, replay, err := keepBody(r)
	if err != nil {
		return nil, err
	}
	for n := 0; ; n++ {
		last := n >= p.retries || !replay
		resp, why, err := t.attempt(r, p, body)
		if why == "" || last {
			if err != nil && why == "timeout" {
				err = fmt.Errorf("%w: %w", errBackendTimeout, err)
			}
			return resp, err
		}
		if resp != nil {
			_, _ = io.CopyN(io.Discard, resp.Body, retryDrain)
			resp.Body.Close()
		}
		if t.retried != nil {
			t.retried(tg.route, why)
		}
		select {
		case <-time.After(p.wait(n)):
		case <-r.Context().Done():
			return nil, context.Cause(r.Context())
		}
	}
}

// attempt sends r once, bounded by the per-try timeout, and says why it
// is worth sending again ("" not): an answer with one of the codes, a
// connection that failed, an attempt that timed out. An answer returned
// keeps its attempt's context until its body is closed.
func (t *retryTransport) attempt(r *http.Request, p *retryPolicy, body []byte) (*http.Response, string, error) {
	ctx, cancel := r.Context(), context.CancelFunc(func() {})
	if p.perTry > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, p.perTry, errBackendTimeout)
	}
	req := r.WithContext(ctx)
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		defer cancel()
		switch {
		case r.Context().Err() != nil:
			// The client left, or the request timeout ended the exchange:
			// nothing to retry for.
			return nil, "", err
		case errors.Is(context.Cause(ctx), errBackendTimeout):
			return nil, "timeout", err
		}
		return nil, "connection", err
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
		// An upgraded connection (101) is written to as well.
		resp.Body = &cancelOnCloseRW{ReadWriteCloser: rw, cancel: cancel}
	} else {
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	}
	if slices.Contains(p.codes, resp.StatusCode) {
		return resp, "code", nil
	}
	return resp, "", nil
}

// keepBody reads a request's body so that it can be sent again: nil and
// true for none; false when it is larger than maxRetryBody (r's body then
// streams what was read and the rest, once).
func keepBody(r *http.Request) ([]byte, bool, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxRetryBody+1))
	if err != nil {
		return nil, false, fmt.Errorf("reading the request body: %w", err)
	}
	if len(buf) > maxRetryBody {
		r.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), Closer: r.Body}
		return nil, false, nil
	}
	r.Body.Close()
	return buf, true, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

type cancelOnCloseRW struct {
	io.ReadWriteCloser
	cancel context.CancelFunc
}

func (c *cancelOnCloseRW) Close() error {
	err := c.ReadWriteCloser.Close()
	c.cancel()
	return err
}

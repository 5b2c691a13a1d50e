package simapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to a Cloud over HTTP. Transient failures (connection errors,
// 5xx) are retried with exponential backoff up to Retries times; a 429 is
// returned at once as a *ThrottledError so that the caller's own throttling
// policy (Outrigger's cloud-call layer) decides how long everyone waits.
type Client struct {
	// BaseURL is the cloud's address, e.g. http://127.0.0.1:8480.
	BaseURL string
	// HTTP is the client used; it should carry a timeout.
	HTTP *http.Client
	// Retries is how many times a transient failure is retried.
	Retries int
	// Admin marks requests as the operator's: not counted, no faults.
	Admin bool
	// Caller, when set, is sent as CallerHeader: who the cloud's call log
	// says made each call.
	Caller string
}

// NewClient returns a client with a per-request timeout.
func NewClient(baseURL string, timeout time.Duration, retries int) *Client {
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		HTTP:    &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}},
		Retries: retries,
	}
}

// ThrottledError is a 429 from the cloud. Its RetryAfter method makes
// Outrigger's cloud-call layer treat it as throttling.
type ThrottledError struct {
	After time.Duration
	Msg   string
}

func (e *ThrottledError) Error() string {
	return "sim cloud throttled the request: " + e.Msg
}

// RetryAfter is how long the cloud asked the client to wait.
func (e *ThrottledError) RetryAfter() time.Duration { return e.After }

// APIError is any other non-2xx answer.
type APIError struct {
	Status int
	Err    Error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("sim cloud: %s (HTTP %d): %s", e.Err.Code, e.Status, e.Err.Message)
}

// IsCode reports whether err is the cloud's typed answer code (one of the
// Code constants). A bare HTTP status is never enough: a 404 from a wrong
// URL or a proxy is not "the instance is gone".
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Err.Code == code
}

// Get returns the instance with the given ID or name.
func (c *Client) Get(ctx context.Context, idOrName string) (Instance, error) {
	var in Instance
	err := c.do(ctx, http.MethodGet, "/v1/instances/"+idOrName, nil, &in)
	return in, err
}

// List returns every instance.
func (c *Client) List(ctx context.Context) ([]Instance, error) {
	var out []Instance
	err := c.do(ctx, http.MethodGet, "/v1/instances", nil, &out)
	return out, err
}

// BatchGet looks up many instances in one call.
func (c *Client) BatchGet(ctx context.Context, req BatchGetRequest) (BatchGetResponse, error) {
	var out BatchGetResponse
	err := c.do(ctx, http.MethodPost, "/v1/batch/instances", req, &out)
	return out, err
}

// Create creates an instance.
func (c *Client) Create(ctx context.Context, req CreateRequest) (Instance, error) {
	var out Instance
	err := c.do(ctx, http.MethodPost, "/v1/instances", req, &out)
	return out, err
}

// Action runs start, stop or terminate on an instance (by ID or name).
func (c *Client) Action(ctx context.Context, idOrName, action string) (Instance, error) {
	var out Instance
	err := c.do(ctx, http.MethodPost, "/v1/instances/"+idOrName+"/"+action, nil, &out)
	return out, err
}

// Settings reads the cloud's behaviour knobs.
func (c *Client) Settings(ctx context.Context) (Settings, error) {
	var out Settings
	err := c.do(ctx, http.MethodGet, "/v1/settings", nil, &out)
	return out, err
}

// SetSettings replaces the cloud's behaviour knobs.
func (c *Client) SetSettings(ctx context.Context, s Settings) error {
	return c.do(ctx, http.MethodPut, "/v1/settings", s, nil)
}

// Calls reads the cloud's call counters.
func (c *Client) Calls(ctx context.Context) (Calls, error) {
	var out Calls
	err := c.do(ctx, http.MethodGet, "/v1/calls", nil, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.doIf(ctx, method, path, nil, in, out)
}

// doIf is do with IfTagsHeader carrying match, when not nil.
func (c *Client) doIf(ctx context.Context, method, path string, match map[string]string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
	}
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, path, match, body, out)
		if err == nil || !transient(err) || attempt >= c.Retries || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff *= 2
	}
}

func transient(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	var te *ThrottledError
	return !errors.As(err, &te) // connection errors and timeouts
}

func (c *Client) once(ctx context.Context, method, path string, match map[string]string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building %s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Admin {
		req.Header.Set(AdminHeader, "true")
	}
	if c.Caller != "" {
		req.Header.Set(CallerHeader, c.Caller)
	}
	if match != nil {
		v := url.Values{}
		for k, val := range match {
			v.Set(k, val)
		}
		req.Header.Set(IfTagsHeader, v.Encode())
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("sim cloud %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("sim cloud %s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		after := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			after = time.Duration(s) * time.Second
		}
		return &ThrottledError{After: after, Msg: method + " " + path}
	}
	if resp.StatusCode >= 300 {
		ae := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(data, &ae.Err) != nil {
			ae.Err.Message = string(data)
		}
		return ae
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("sim cloud %s %s: decoding answer: %w", method, path, err)
		}
	}
	return nil
}

// Routes lists the route table.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	var out []Route
	err := c.do(ctx, http.MethodGet, "/v1/routes", nil, &out)
	return out, err
}

// CreateRoute adds a route.
func (c *Client) CreateRoute(ctx context.Context, r Route) error {
	return c.do(ctx, http.MethodPost, "/v1/routes", r, nil)
}

// DeleteRoute removes a route by name, when its tags carry match (nil: any).
func (c *Client) DeleteRoute(ctx context.Context, name string, match map[string]string) error {
	return c.doIf(ctx, http.MethodDelete, "/v1/routes/"+url.PathEscape(name), match, nil, nil)
}

// PodCIDRs returns the pod CIDRs the cloud assigned an instance.
func (c *Client) PodCIDRs(ctx context.Context, idOrName string) ([]string, error) {
	var out []string
	err := c.do(ctx, http.MethodGet, "/v1/instances/"+idOrName+"/pod-cidrs", nil, &out)
	return out, err
}

// IsConflict reports whether err is the cloud's 409.
func IsConflict(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}

// LoadBalancers lists the cloud's load balancers.
func (c *Client) LoadBalancers(ctx context.Context) ([]LoadBalancer, error) {
	var out []LoadBalancer
	err := c.do(ctx, http.MethodGet, "/v1/loadbalancers", nil, &out)
	return out, err
}

// GetLoadBalancer returns one load balancer; CodeLoadBalancerNotFound tells
// a missing one.
func (c *Client) GetLoadBalancer(ctx context.Context, name string) (LoadBalancer, error) {
	var out LoadBalancer
	err := c.do(ctx, http.MethodGet, "/v1/loadbalancers/"+url.PathEscape(name), nil, &out)
	return out, err
}

// PutLoadBalancer creates a load balancer, or replaces one whose tags carry
// match (nil: any).
func (c *Client) PutLoadBalancer(ctx context.Context, name string, spec LoadBalancerSpec, match map[string]string) (LoadBalancer, error) {
	var out LoadBalancer
	err := c.doIf(ctx, http.MethodPut, "/v1/loadbalancers/"+url.PathEscape(name), match, spec, &out)
	return out, err
}

// SetBackends replaces the backends of a load balancer whose tags carry
// match (nil: any).
func (c *Client) SetBackends(ctx context.Context, name string, backends []Backend, match map[string]string) error {
	return c.doIf(ctx, http.MethodPut, "/v1/loadbalancers/"+url.PathEscape(name)+"/backends", match, backends, nil)
}

// DeleteLoadBalancer deletes a load balancer whose tags carry match (nil:
// any); CodeLoadBalancerNotFound tells a missing one.
func (c *Client) DeleteLoadBalancer(ctx context.Context, name string, match map[string]string) error {
	return c.doIf(ctx, http.MethodDelete, "/v1/loadbalancers/"+url.PathEscape(name), match, nil, nil)
}

// APIErrorCode returns the cloud's error code ("QuotaExceeded", ...) of err,
// or "".
func APIErrorCode(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Err.Code
	}
	return ""
}

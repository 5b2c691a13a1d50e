package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxRequestsPerRun bounds any one run in count, besides its duration.
const maxRequestsPerRun = 50_000_000

// target is where the load generator sends one row's requests.
type target struct {
	protocol Protocol
	url      string
	host     string
	// grpcFile holds grpcMessage, for h2load.
	grpcFile string
}

// client returns an HTTP client speaking the row's protocol with up to conns
// HTTP/1.1 connections (HTTP/2: streams multiplexed, as h2load -m does).
func (t target) client(conns int) *http.Client {
	var protos http.Protocols
	switch {
	case t.protocol.H2 && t.protocol.TLS:
		protos.SetHTTP2(true)
	case t.protocol.H2:
		protos.SetUnencryptedHTTP2(true)
	default:
		protos.SetHTTP1(true)
	}
	tr := &http.Transport{
		Protocols:           &protos,
		DisableKeepAlives:   !t.protocol.KeepAlive,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		// The benchmark's own self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: t.host},
	}
	if t.protocol.H2 {
		tr.MaxConnsPerHost = 0
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// once sends one request, reading the whole answer.
func (t target) once(ctx context.Context, c *http.Client) error {
	if t.protocol.GRPC {
		return t.call(ctx, c)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return err
	}
	req.Host = t.host
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// throughput is one maximum-throughput run.
type throughput struct {
	ok, failed int64
	elapsed    time.Duration
	firstErr   error
}

func (r throughput) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

// maxRate keeps conns requests in flight for d (and at most
// maxRequestsPerRun requests): the most the target serves.
func maxRate(ctx context.Context, t target, conns int, d time.Duration) throughput {
	c := t.client(conns)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		ok, failed, issued atomic.Int64
		errOnce            sync.Once
		firstErr           error
		wg                 sync.WaitGroup
	)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for ctx.Err() == nil && issued.Add(1) <= maxRequestsPerRun {
				err := t.once(ctx, c)
				switch {
				case err == nil:
					ok.Add(1)
				case ctx.Err() != nil:
					// cut by the end of the run
				default:
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
			}
		})
	}
	wg.Wait()
	return throughput{ok: ok.Load(), failed: failed.Load(), elapsed: time.Since(start), firstErr: firstErr}
}

// latencies is one fixed-rate run: each request's time from when it was due
// to its answer (a late start counts against the target, as in wrk2).
type latencies struct {
	sorted []time.Duration
	failed int
}

func (l latencies) quantile(q float64) time.Duration {
	if len(l.sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(l.sorted))), len(l.sorted)-1)
	return l.sorted[i]
}

// fixedRate sends rate requests a second for d, each due at its own time
// whatever the previous ones did, from up to 4*conns requests in flight.
func fixedRate(ctx context.Context, t target, conns int, rate float64, d time.Duration) latencies {
	n := min(int(rate*d.Seconds()), maxRequestsPerRun)
	if n < 1 {
		return latencies{}
	}
	c := t.client(conns)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	due := make(chan time.Time)
	var (
		mu     sync.Mutex
		res    = latencies{sorted: make([]time.Duration, 0, n)}
		wg     sync.WaitGroup
		period = time.Duration(float64(time.Second) / rate)
	)
	for range 4 * conns {
		wg.Go(func() {
			for at := range due {
				err := t.once(ctx, c)
				took := time.Since(at)
				mu.Lock()
				if err != nil {
					res.failed++
				} else {
					res.sorted = append(res.sorted, took)
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * period)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		select {
		case due <- at:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(due)
	wg.Wait()
	slices.Sort(res.sorted)
	return res
}

// call makes one unary gRPC call, successful when its status is 0.
func (t target) call(ctx context.Context, c *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(t.url, "/")+grpcPath, bytes.NewReader(grpcMessage))
	if err != nil {
		return err
	}
	req.Host = t.host
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" {
		status = resp.Header.Get("Grpc-Status")
	}
	if resp.StatusCode != http.StatusOK || status != "0" {
		return fmt.Errorf("status %d, grpc-status %q", resp.StatusCode, status)
	}
	return nil
}

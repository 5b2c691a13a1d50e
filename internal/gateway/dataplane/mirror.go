package dataplane

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// A rule's RequestMirror filters, and a backend's (their Mirrors, resolved
// by the controller), send a copy of a share of its requests (of those
// sent to that backend) to other backends, whose answers are read and
// dropped. The copy is the request as the filters before the mirror's
// left it (a rule's, then a backend's), with its Host: the specification
// asks nothing else of it. A mirror is best effort and costs the request
// nothing: it never delays, changes or fails it. What a mirror may hold
// is bounded, since a route's mirror backend may be slow on purpose:
//
//   - a slot: at most Limits.MaxMirrors mirrored requests are in flight
//     or waiting for their body, per data plane; a mirror finding none
//     free is dropped (outrigger_gateway_mirrors_dropped_total);
//   - a body: the copy is kept as the backend's request reads it, up to
//     mirrorBodyLimit; a longer body, or one the request never read to
//     its end, is not mirrored (nothing is read that the backend does not
//     read);
//   - time: Limits.MirrorTimeout for the body to be read, then as long
//     again from its sending, its answer included.
//
// A mirror goes only to the address the controller resolved for it;
// nothing of the request chooses where.

// mirrorBodyLimit is the longest body mirrored: it bounds the memory a
// slot holds.
const mirrorBodyLimit = 64 << 10

// mirrorAnswerLimit is how much of a mirror's answer is read (and
// dropped) before its connection is closed instead.
const mirrorAnswerLimit = 1 << 20

// mirrorer sends a data plane's mirrored requests.
type mirrorer struct {
	rt      http.RoundTripper
	timeout time.Duration
	// hops is the trusted hops served now, for X-Forwarded-For.
	hops  func() int
	slots chan struct{}
	log   logr.Logger
	// intn draws in [0, n): the share's random source, fixed by tests.
	intn func(n int32) int32
	// dropped counts mirrors not sent for want of a slot.
	dropped atomic.Int64
}

func newMirrorer(rt http.RoundTripper, l Limits, hops func() int, log logr.Logger) *mirrorer {
	return &mirrorer{rt: rt, timeout: l.MirrorTimeout, hops: hops, slots: make(chan struct{}, l.MaxMirrors), log: log, intn: rand.Int32N}
}

// sampled decides whether a request is mirrored to m, given a draw in
// [0, m.Denominator): Numerator out of every Denominator are; a zero
// Denominator is every request.
func sampled(m Mirror, intn func(n int32) int32) bool {
	switch {
	case m.Denominator <= 0, m.Numerator >= m.Denominator:
		return true
	case m.Numerator <= 0:
		return false
	}
	return intn(m.Denominator) < m.Numerator
}

// mirrorable says whether a request can be copied at all: not an upgrade
// (a WebSocket is a conversation, not a request), not CONNECT, not a body
// announced longer than the limit.
func mirrorable(req *http.Request) bool {
	return req.Method != http.MethodConnect && req.Header.Get("Upgrade") == "" && req.ContentLength <= mirrorBodyLimit
}

// start mirrors req to the mirrors that sample it and get a slot. The
// copy is taken now, as the filters left the request; its body as the
// backend's request reads it. The returned func ends the mirroring
// when the request ends (a body not read to its end is not mirrored);
// it may be called more than once.
func (m *mirrorer) start(req *http.Request, route string, mirrors []Mirror) func() {
	if m == nil || len(mirrors) == 0 || !mirrorable(req) {
		return func() {}
	}
	var targets []Mirror
	for _, mi := range mirrors {
		if !sampled(mi, m.intn) {
			continue
		}
		select {
		case m.slots <- struct{}{}:
			targets = append(targets, mi)
		default:
			m.dropped.Add(1)
		}
	}
	if len(targets) == 0 {
		return func() {}
	}
	run := &mirrorRun{m: m, route: route, targets: targets, tmpl: m.copyOf(req)}
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		// No body, or one declared empty (which the backend's request
		// does not read): the copy is whole now.
		run.finish(true)
		return func() {}
	}
	// A body still unread when the timeout ends (a long stream, a slow
	// upload) gives its slots back: a slot is held at most twice the
	// timeout, waiting and sending.
	run.mu.Lock()
	run.wait = time.AfterFunc(m.timeout, func() { run.finish(false) })
	run.mu.Unlock()
	req.Body = &teeBody{ReadCloser: req.Body, run: run}
	return func() { run.finish(false) }
}

// copyOf is the mirrored request without its body: method, path and
// query, Host and headers as the filters left them, the
// X-Forwarded headers the backend is sent, the hop-by-hop ones dropped.
func (m *mirrorer) copyOf(req *http.Request) *http.Request {
	out := &http.Request{
		Method:     req.Method,
		Host:       req.Host,
		Header:     req.Header.Clone(),
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
	}
	u := *req.URL
	u.Scheme, u.User, u.Fragment = "http", nil, ""
	out.URL = &u
	if out.Header == nil {
		out.Header = http.Header{}
	}
	dropHopHeaders(out.Header)
	out.Header.Del("Content-Length")
	if _, ok := out.Header["User-Agent"]; !ok {
		// Not Go's own: the backend sees the client's, or none.
		out.Header.Set("User-Agent", "")
	}
	setForwarded(&httputil.ProxyRequest{In: req, Out: out}, m.hops())
	return out
}

// hopHeaders are the headers of one connection (RFC 9110, 7.6.1), never
// forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func dropHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	trailers := h.Get("Te") == "trailers" // gRPC's, kept as a proxy keeps it
	for _, name := range hopHeaders {
		h.Del(name)
	}
	if trailers {
		h.Set("Te", "trailers")
	}
}

// mirrorRun is one request's mirroring: its copy, the mirrors holding a
// slot for it, and its body as read so far.
type mirrorRun struct {
	m       *mirrorer
	route   string
	targets []Mirror
	tmpl    *http.Request

	mu   sync.Mutex
	body bytes.Buffer
	done bool
	// wait ends the wait for the body.
	wait *time.Timer
}

// read keeps what the backend's request read of the body; its end sends
// the mirrors, a body over the limit gives their slots back.
func (r *mirrorRun) read(p []byte, err error) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	over := r.body.Len()+len(p) > mirrorBodyLimit
	if !over {
		r.body.Write(p)
	}
	r.mu.Unlock()
	switch {
	case over:
		r.finish(false)
	case err == io.EOF:
		r.finish(true)
	}
}

// finish sends the mirrors (whole: the body was read to its end) or gives
// their slots back; only the first call counts.
func (r *mirrorRun) finish(whole bool) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	r.done = true
	if r.wait != nil {
		r.wait.Stop()
	}
	body := r.body.Bytes()
	r.mu.Unlock()
	for _, t := range r.targets {
		if !whole {
			<-r.m.slots
			continue
		}
		go r.m.send(r.tmpl, r.route, t, body)
	}
}

// send sends one mirrored request and drops its answer, then gives its
// slot back. Its context is its own: the request's end does not cut it,
// the timeout does.
func (m *mirrorer) send(tmpl *http.Request, route string, t Mirror, body []byte) {
	defer func() { <-m.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	out := tmpl.Clone(withTarget(ctx, target{route: route, address: t.Address, h2c: t.H2C}))
	out.URL.Host = t.Address
	out.Body, out.ContentLength = http.NoBody, 0
	if len(body) > 0 {
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	resp, err := m.rt.RoundTrip(out)
	if err != nil {
		m.log.V(2).Info("Mirror failed", "route", route, "address", t.Address, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, mirrorAnswerLimit))
	resp.Body.Close()
}

// teeBody hands the mirroring what the backend's request reads of a body.
type teeBody struct {
	io.ReadCloser
	run *mirrorRun
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 || err != nil {
		b.run.read(p[:n], err)
	}
	return n, err
}

package console

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

//go:embed assets
var assets embed.FS

// syncWait bounds how long a request waits for the informers' first sync.
const syncWait = 30 * time.Second

// Options configure a console.
type Options struct {
	// Client reads Services, Nodes, EndpointSlices and Events, and
	// discovers whether the Gateway API is served. Nil: no cluster is
	// read (tenant mode's own console, whose clusters are the tenants'):
	// the page shows the Tenants and the cloud calls only.
	Client kubernetes.Interface
	// Gateway, when set, reads GatewayClasses, Gateways and their routes
	// (HTTPRoute, GRPCRoute, TCPRoute, UDPRoute, TLSRoute) where the Gateway API is
	// served.
	// Nil: the page says Gateways are not read.
	Gateway gwclient.Interface
	// Gatherer gives the call layer's metrics: controller-runtime's
	// registry in-process, a ScrapeGatherer apart. Nil leaves the charts
	// empty.
	Gatherer prometheus.Gatherer
	// Ranges are the address ranges whose usage the page shows.
	Ranges []Range
	// RangeSource, when set, adds ranges the provider knows of.
	RangeSource RangeSource
	// Class is the loadBalancerClass this Outrigger owns ("" for
	// Services without a class), when Owners is empty.
	Class string
	// Owners are the providers of this Outrigger and what each serves.
	// Empty: one unnamed provider serving every node and Class.
	Owners []Owner
	// Nodes, when set, is the node cache the console reads (the manager's,
	// shared with the controllers) instead of a node informer of its own.
	Nodes crcache.Informers
	// Degraded, when set, says which provider method families are
	// degraded (calls abandoned at their deadline and not returned): the
	// page shows each as a badge.
	Degraded func() []string
	// Actions, when set, makes the page offer them. Nil: read-only.
	Actions Actions
	// Tenants, when set, are tenant mode's tenants as this replica sees
	// them (the tenant Leases and its own runs): the page shows a
	// Tenants view. Asked at every sample and snapshot.
	Tenants func() []Tenant
	// Interval is how often the metrics are sampled and changes pushed.
	// Default 1s.
	Interval time.Duration
	// History is how many samples the charts keep. Default 300.
	History int
	// IdleAfter is how long after the last page or request the console's
	// watches (and its metrics sampling) stop, until the next request.
	// Default 5m.
	IdleAfter time.Duration
	// Log receives the console's own errors.
	Log logr.Logger
	// Clock times the sampling and pushes (Interval), the idle watches
	// (IdleAfter) and the snapshots' ages. Default: the real clock; tests
	// pass a fake one and step it through the intervals.
	Clock clock.WithTicker
}

// RangeSource is what a provider implements to show its address ranges
// (a VIP pool, say) on the console, without the console knowing the
// provider. It is asked at every snapshot, so ranges may change.
type RangeSource interface {
	ConsoleRanges() []Range
}

// Server serves the console. Its informers start on the first request, so
// a manager that serves the console but is never asked pays nothing.
type Server struct {
	opts    Options
	sampler *sampler

	visitOnce sync.Once
	// visited is closed at the first request: the metrics sampling waits
	// for it, so that an unvisited console gathers nothing every second.
	visited chan struct{}
	// awaitsVisit is set once Start waits for the first request (tests
	// wait on it).
	awaitsVisit atomic.Bool
	// life ends when Start's context does; the informers stop with it.
	life    context.Context
	endLife context.CancelFunc

	// mu guards w, the running watches: nil until a request needs them,
	// and again once nobody has looked for IdleAfter.
	mu sync.Mutex
	w  *watches
	// reaps counts reap's passes (tests wait on it).
	reaps atomic.Uint64

	version atomic.Uint64 // bumped by every informer event
	changed chan struct{} // poked, without blocking, by the same

	// lastDegraded is what Degraded said at the last sample;
	// lastTenants what Tenants did, encoded.
	lastDegraded string
	lastTenants  string

	callsMu sync.Mutex
	calls   []Entry // call-layer timeline entries, newest last

	snapMu sync.Mutex
	snaps  map[View]*viewSnapshot // the last snapshot of each view asked for

	// traffic reads the Gateway data planes' metrics (nil without a
	// cluster).
	traffic *trafficReader
}

// viewSnapshot is the JSON of one view's last snapshot.
type viewSnapshot struct {
	data    []byte
	version uint64    // the change count it is current to
	at      time.Time // when it was built
	used    time.Time // when it was last asked for
}

// maxViews bounds the views whose snapshots are kept: pages with the same
// filters share one; a page typing a filter asks for one per keystroke.
const maxViews = 32

func New(opts Options) *Server {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.History <= 0 {
		opts.History = 300
	}
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = 5 * time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	var g prometheus.Gatherer = prometheus.Gatherers{}
	if opts.Gatherer != nil {
		g = opts.Gatherer
	}
	life, end := context.WithCancel(context.Background())
	s := &Server{opts: opts, sampler: newSampler(g, opts.History), life: life, endLife: end,
		visited: make(chan struct{}), changed: make(chan struct{}, 1)}
	if opts.Client != nil {
		// A read ending is a change: the pages get the new figures.
		s.traffic = newTrafficReader(life, opts.Client, opts.Clock, opts.Log.WithName("gateway-traffic"), s.poke)
	}
	return s
}

// Start samples the call metrics every Interval, from the first request
// on, until ctx ends; the informers started by requests stop then too. It
// is a controller-runtime Runnable, so a manager can run it.
func (s *Server) Start(ctx context.Context) error {
	defer s.endLife()
	// Gathering the whole registry every second is garbage every second:
	// nobody has asked for the charts until someone opens the console.
	s.awaitsVisit.Store(true)
	select {
	case <-ctx.Done():
		return nil
	case <-s.visited:
	}
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	s.sample(s.opts.Clock.Now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C():
			if s.reap(now) {
				s.sample(now)
				if s.traffic != nil {
					s.traffic.refresh()
				}
			}
		}
	}
}

func (s *Server) NeedLeaderElection() bool { return false }

func (s *Server) sample(now time.Time) {
	if s.opts.Degraded != nil {
		// A family's state changes without any object changing: a new
		// snapshot carries the badge.
		d := strings.Join(s.opts.Degraded(), "\n")
		if d != s.lastDegraded {
			s.lastDegraded = d
			s.poke()
		}
	}
	if s.opts.Tenants != nil {
		// Nor does a tenant's: its run starts, fails, moves to another
		// replica.
		t, _ := json.Marshal(s.opts.Tenants())
		if string(t) != s.lastTenants {
			s.lastTenants = string(t)
			s.poke()
		}
	}
	entries := s.sampler.take(now)
	if len(entries) == 0 {
		return
	}
	s.callsMu.Lock()
	s.calls = append(s.calls, entries...)
	if len(s.calls) > maxTimeline {
		s.calls = s.calls[len(s.calls)-maxTimeline:]
	}
	s.callsMu.Unlock()
	s.poke()
}

func (s *Server) poke() {
	s.version.Add(1)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *Server) Snapshot(view View) Snapshot {
	w, release := s.use()
	defer release()
	// A resource listed but never synced (a watch refused, say) must not
	// hang every page: after a while, show what there is.
	select {
	case <-w.ready:
	case <-time.After(syncWait):
	}
	ranges := s.opts.Ranges
	if s.opts.RangeSource != nil {
		ranges = append(append([]Range(nil), ranges...), s.opts.RangeSource.ConsoleRanges()...)
	}
	s.callsMu.Lock()
	calls := append([]Entry(nil), s.calls...)
	s.callsMu.Unlock()
	snap := build(inputs{
		now:      s.opts.Clock.Now(),
		services: w.listers.services(),
		nodes:    w.listers.nodes(),
		slices:   w.listers.slices(),
		events:   w.listers.events(),
		gateways: w.listers.gateways(),
		ranges:   ranges,
		owners:   s.owners(),
		calls:    calls,
		view:     view,
	})
	if s.traffic != nil {
		s.traffic.attach(snap.Gateways)
	}
	snap.Warnings = append([]string(nil), w.warnings...)
	snap.NoGatewayAPI = w.noGateways
	if s.opts.Degraded != nil {
		snap.Degraded = s.opts.Degraded()
	}
	select {
	case <-w.ready:
	default:
		snap.Warnings = append(snap.Warnings, fmt.Sprintf("Still loading: the informers have not synced after %s", syncWait))
	}
	if s.opts.Actions != nil {
		snap.Actions = s.opts.Actions.List()
	}
	if s.opts.Tenants != nil {
		snap.TenantMode = true
		snap.Tenants, snap.TenantCount = tenantView(s.opts.Tenants())
	}
	snap.NoCluster = s.opts.Client == nil
	return snap
}

// snapshotJSON returns view's snapshot's JSON and the change count it is
// current to, rebuilt only when something changed since, and at most once
// per Interval: every open page with the same filters shares it.
func (s *Server) snapshotJSON(view View) ([]byte, uint64) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	now := s.opts.Clock.Now()
	v := s.version.Load()
	last := s.snaps[view]
	if last != nil && (v == last.version || now.Sub(last.at) < s.opts.Interval) {
		last.used = now
		return last.data, last.version
	}
	data, err := json.Marshal(s.Snapshot(view))
	if err != nil {
		s.opts.Log.Error(err, "Encoding the console snapshot")
		if last == nil {
			return nil, 0
		}
		return last.data, last.version
	}
	if s.snaps == nil {
		s.snaps = map[View]*viewSnapshot{}
	}
	if last == nil && len(s.snaps) >= maxViews {
		var oldest View
		first := true
		for k, o := range s.snaps {
			if first || o.used.Before(s.snaps[oldest].used) {
				oldest, first = k, false
			}
		}
		delete(s.snaps, oldest)
	}
	// v was read before building: a change during the build is sent
	// again next time, never lost.
	s.snaps[view] = &viewSnapshot{data: data, version: v, at: s.opts.Clock.Now(), used: now}
	return data, v
}

type Owner struct {
	// Provider is its name.
	Provider string
	// Class is the loadBalancerClass of its Services ("" for those
	// without a class).
	Class string
	// Platforms are the providerID schemes of its nodes; empty: all.
	Platforms []string
}

func (s *Server) owners() []Owner {
	if len(s.opts.Owners) > 0 {
		return s.opts.Owners
	}
	return []Owner{{Class: s.opts.Class}}
}

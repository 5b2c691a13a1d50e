package monitoring

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// scrape is one scrape's metric families.
type scrape struct {
	at       time.Time
	families map[string]*dto.MetricFamily
}

func (s scrape) has(name string) bool { return s.families[name] != nil }

// sum adds up the values of name's series (a histogram's sample count)
// whose label has the value, or all of them when label is "". The value
// may be followed by "/<provider>", as controller names are with several
// providers.
func (s scrape) sum(name, label, value string) float64 {
	mf := s.families[name]
	if mf == nil {
		return 0
	}
	var total float64
	for _, m := range mf.GetMetric() {
		if label != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
			return l.GetName() == label && (l.GetValue() == value || strings.HasPrefix(l.GetValue(), value+"/"))
		}) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// scraper scrapes /metrics every 500 ms into a memStorage, with the
// job and instance labels a Prometheus scrape adds.
type scraper struct {
	url, token string
	client     *http.Client
	storage    *memStorage
	instance   string

	mu      sync.Mutex
	names   map[string]bool // sample names served in any scrape
	scrapes []scrape
	cancel  context.CancelFunc
	done    chan struct{}
}

func startScraper(t *testing.T, url, token string) *scraper {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &scraper{
		url: url, token: token, instance: strings.TrimSuffix(strings.TrimPrefix(url, "https://"), "/metrics"),
		client:  &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}},
		storage: newMemStorage(),
		names:   map[string]bool{},
		cancel:  cancel, done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := s.once(ctx); err != nil && ctx.Err() == nil {
				t.Logf("scrape: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *scraper) stop() {
	s.cancel()
	<-s.done
}

// once scrapes and stores every sample at the scrape's time, as Prometheus
// does with a target that gives no timestamps.
func (s *scraper) once(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	at := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("parsing the scrape: %w", err)
	}
	ts := at.UnixMilli()
	var names []string
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, smp := range samples(name, m) {
				b := labels.NewBuilder(labels.EmptyLabels())
				for _, l := range m.GetLabel() {
					b.Set(l.GetName(), l.GetValue())
				}
				for k, v := range smp.labels {
					b.Set(k, v)
				}
				b.Set(labels.MetricName, smp.name).Set("job", job).Set("instance", s.instance)
				s.storage.add(b.Labels(), ts, smp.value)
				names = append(names, smp.name)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		s.names[n] = true
	}
	s.scrapes = append(s.scrapes, scrape{at: at, families: families})
	return nil
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples are the series one metric of the text format stands for, named
// as Prometheus names them (a histogram's _bucket, _sum and _count).
func samples(name string, m *dto.Metric) []sample {
	switch {
	case m.Counter != nil:
		return []sample{{name, nil, m.GetCounter().GetValue()}}
	case m.Gauge != nil:
		return []sample{{name, nil, m.GetGauge().GetValue()}}
	case m.Untyped != nil:
		return []sample{{name, nil, m.GetUntyped().GetValue()}}
	case m.Summary != nil:
		out := []sample{{name + "_sum", nil, m.GetSummary().GetSampleSum()}, {name + "_count", nil, float64(m.GetSummary().GetSampleCount())}}
		for _, q := range m.GetSummary().GetQuantile() {
			out = append(out, sample{name, map[string]string{"quantile": strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)}, q.GetValue()})
		}
		return out
	case m.Histogram != nil:
		h := m.GetHistogram()
		out := []sample{{name + "_sum", nil, h.GetSampleSum()}, {name + "_count", nil, float64(h.GetSampleCount())}}
		inf := false
		for _, bk := range h.GetBucket() {
			le := strconv.FormatFloat(bk.GetUpperBound(), 'g', -1, 64)
			if bk.GetUpperBound() > 1e308 {
				le, inf = "+Inf", true
			}
			out = append(out, sample{name + "_bucket", map[string]string{"le": le}, float64(bk.GetCumulativeCount())})
		}
		if !inf {
			out = append(out, sample{name + "_bucket", map[string]string{"le": "+Inf"}, float64(h.GetSampleCount())})
		}
		return out
	}
	return nil
}

// after waits for n scrapes, counted from now, of which the last
// satisfies cond (if given), and returns that scrape's time.
func (s *scraper) after(t *testing.T, n int, what string, cond func(scrape) bool) time.Time {
	t.Helper()
	s.mu.Lock()
	from := len(s.scrapes)
	s.mu.Unlock()
	var at time.Time
	testenv.Eventually(t, 60*time.Second, what, func() (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.scrapes) < from+n {
			return false, nil
		}
		last := s.scrapes[len(s.scrapes)-1]
		if cond != nil && !cond(last) {
			return false, nil
		}
		at = last.at
		return true, nil
	})
	return at
}

func (s *scraper) served(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// eval evaluates expr at the given time as a rule or a panel's last point
// is, and returns its series, one "labels => value" a line.
func (s *scraper) eval(t *testing.T, eng *promql.Engine, expr string, at time.Time) []string {
	t.Helper()
	q, err := eng.NewInstantQuery(context.Background(), s.storage, nil, expr, at)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", expr, res.Err)
	}
	var out []string
	switch v := res.Value.(type) {
	case promql.Vector:
		for _, smp := range v {
			out = append(out, fmt.Sprintf("%s => %g", smp.Metric, smp.F))
		}
	case promql.Scalar:
		out = append(out, fmt.Sprintf("scalar %g", v.V))
	default:
		t.Fatalf("%s: a %s, not an instant vector", expr, res.Value.Type())
	}
	return out
}

package monitoring

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// memStorage holds scraped float samples in memory and answers the PromQL
// engine's queries: what a Prometheus's TSDB does for these tests, without
// the TSDB (and the remote-write clients its package brings).
type memStorage struct {
	mu     sync.Mutex
	series map[string]*memSeries // by labels.String()
}

type memSeries struct {
	lset    labels.Labels
	samples []chunks.Sample // in time order
}

func newMemStorage() *memStorage { return &memStorage{series: map[string]*memSeries{}} }

// add appends a sample; samples of one series come in time order.
func (m *memStorage) add(lset labels.Labels, t int64, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := lset.String()
	s := m.series[key]
	if s == nil {
		s = &memSeries{lset: lset}
		m.series[key] = s
	}
	s.samples = append(s.samples, floatSample{t, v})
}

func (m *memStorage) Querier(mint, maxt int64) (storage.Querier, error) {
	return &memQuerier{m: m, mint: mint, maxt: maxt}, nil
}

type memQuerier struct {
	m          *memStorage
	mint, maxt int64
}

// selectSeries returns the series matching every matcher, with their
// samples in [mint, maxt], sorted by labels.
func (q *memQuerier) selectSeries(matchers []*labels.Matcher) []*memSeries {
	q.m.mu.Lock()
	defer q.m.mu.Unlock()
	var out []*memSeries
	for _, s := range q.m.series {
		if !slices.ContainsFunc(matchers, func(m *labels.Matcher) bool { return !m.Matches(s.lset.Get(m.Name)) }) {
			in := slices.DeleteFunc(slices.Clone(s.samples), func(smp chunks.Sample) bool { return smp.T() < q.mint || smp.T() > q.maxt })
			if len(in) > 0 {
				out = append(out, &memSeries{lset: s.lset, samples: in})
			}
		}
	}
	slices.SortFunc(out, func(a, b *memSeries) int { return labels.Compare(a.lset, b.lset) })
	return out
}

func (q *memQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	var list []storage.Series
	for _, s := range q.selectSeries(matchers) {
		list = append(list, storage.NewListSeries(s.lset, s.samples))
	}
	return &seriesList{list: list, i: -1}
}

func (q *memQuerier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var vals []string
	for _, s := range q.selectSeries(matchers) {
		if v := s.lset.Get(name); v != "" {
			vals = append(vals, v)
		}
	}
	slices.Sort(vals)
	return slices.Compact(vals), nil, nil
}

func (q *memQuerier) LabelNames(_ context.Context, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var names []string
	for _, s := range q.selectSeries(matchers) {
		s.lset.Range(func(l labels.Label) { names = append(names, l.Name) })
	}
	slices.Sort(names)
	return slices.Compact(names), nil, nil
}

func (q *memQuerier) Close() error { return nil }

type seriesList struct {
	list []storage.Series
	i    int
}

func (s *seriesList) Next() bool                        { s.i++; return s.i < len(s.list) }
func (s *seriesList) At() storage.Series                { return s.list[s.i] }
func (s *seriesList) Err() error                        { return nil }
func (s *seriesList) Warnings() annotations.Annotations { return nil }

// floatSample is one scraped value.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }

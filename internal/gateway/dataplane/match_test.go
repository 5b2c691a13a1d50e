package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestRuleIndexAnswersAsTheScan: over random rule sets (Exact, PathPrefix
// with and without a trailing slash, regular expressions, methods and
// headers) and random paths, the index picks the rule a scan in precedence
// order picks.
func TestRuleIndexAnswersAsTheScan(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	segs := []string{"a", "b", "ab", "api", "v1"}
	path := func(max int) string {
		var b strings.Builder
		for range rnd.IntN(max + 1) {
			b.WriteString("/" + segs[rnd.IntN(len(segs))])
		}
		if b.Len() == 0 || rnd.IntN(4) == 0 {
			b.WriteString("/")
		}
		return b.String()
	}
	for set := range 300 {
		var rules []*rule
		for i := range 1 + rnd.IntN(40) {
			m := gwv1.HTTPRouteMatch{}
			switch rnd.IntN(4) {
			case 0:
				m.Path = &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchExact), Value: ptr.To(path(3))}
			case 1:
				m.Path = &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchRegularExpression), Value: ptr.To("/a.*")}
			case 2:
				// No path: a prefix of "/".
			default:
				m.Path = &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(path(3))}
			}
			if rnd.IntN(3) == 0 {
				m.Method = ptr.To(gwv1.HTTPMethodPost)
			}
			if rnd.IntN(3) == 0 {
				m.Headers = []gwv1.HTTPHeaderMatch{{Name: "X-Env", Value: "canary"}}
			}
			ru, err := compileRule(Rule{Route: fmt.Sprintf("r%d", i), Match: m}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, ru)
		}
		x := newRuleIndex(rules)
		for range 50 {
			req := httptest.NewRequest(http.MethodGet, "http://h/", nil)
			req.URL.Path = path(5)
			if rnd.IntN(2) == 0 {
				req.Method = http.MethodPost
			}
			if rnd.IntN(2) == 0 {
				req.Header.Set("X-Env", "canary")
			}
			want, got := x.scan(req), x.lookup(req)
			if got != want {
				t.Fatalf("set %d: %s %s: index took %v, the scan %v", set, req.Method, req.URL.Path, name(got), name(want))
			}
		}
	}
}

func name(ru *rule) string {
	if ru == nil {
		return "none"
	}
	return ru.route + " " + string(ru.path) + " " + ru.value
}

// TestRuleIndexManyPrefixesOfOnePath: a path with more element prefixes
// that have rules than the index keeps lists for is still answered as the
// scan answers.
func TestRuleIndexManyPrefixesOfOnePath(t *testing.T) {
	var rules []*rule
	p := ""
	for i := range maxLists + 4 {
		p += fmt.Sprintf("/s%d", i)
		ru, err := compileRule(Rule{Route: p, Match: gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(p)}, Method: ptr.To(gwv1.HTTPMethodPost)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rules = append([]*rule{ru}, rules...) // the longest first
	}
	last, err := compileRule(Rule{Route: "last", Match: gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/s0")}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules = append(rules, last)
	x := newRuleIndex(rules)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		req := httptest.NewRequest(method, "http://h/", nil)
		req.URL.Path = p + "/x"
		if got, want := x.lookup(req), x.scan(req); got != want {
			t.Errorf("%s: index took %s, the scan %s", method, name(got), name(want))
		}
	}
}

// TestWildcardHostsLongestFirst: a host takes its exact virtual host, then
// the longest wildcard covering it (one label or more), then the any-host
// one.
func TestWildcardHostsLongestFirst(t *testing.T) {
	r, err := compileHTTP(Port{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{
		{Hostname: "*.example.com", Rules: []Rule{{Route: "short"}}},
		{Hostname: "*.a.example.com", Rules: []Rule{{Route: "long"}}},
		{Hostname: "b.a.example.com", Rules: []Rule{{Route: "exact"}}},
		{Rules: []Rule{{Route: "any"}}},
	}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{
		"b.a.example.com":     "b.a.example.com",
		"c.a.example.com":     "*.a.example.com",
		"x.c.a.example.com":   "*.a.example.com",
		"a.example.com":       "*.example.com",
		"C.A.Example.COM.:80": "*.a.example.com",
		"example.com":         "",
		".example.com":        "",
		"other.org":           "",
	} {
		if got := r.host(host); got == nil || got.name != want {
			t.Errorf("%s: virtual host %v, want %q", host, got, want)
		}
	}
}

// BenchmarkRouterRoutes is one request's matching on a host with 1 to
// 10,000 routes of distinct paths, the request taking the last, by the
// index and by a scan of the rules in order: with the index the cost
// barely grows with the routes; a scan is cheaper for a few (fewRules).
func BenchmarkRouterRoutes(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			var rules []Rule
			for i := range n {
				rules = append(rules, Rule{Route: fmt.Sprintf("r%d", i), Match: gwv1.HTTPRouteMatch{
					Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(fmt.Sprintf("/svc%d", i))},
				}})
			}
			r, err := compileHTTP(Port{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Hostname: "shop.example.com", Rules: rules}}}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://shop.example.com/svc%d/items/42", n-1), nil)
			b.Run("matching=index", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if ru := r.host(req.Host).rules.lookup(req); ru == nil {
						b.Fatal("no rule")
					}
				}
			})
			// The scan the index replaced, side by side.
			b.Run("matching=scan", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if ru := r.host(req.Host).rules.scan(req); ru == nil {
						b.Fatal("no rule")
					}
				}
			})
		})
	}
}

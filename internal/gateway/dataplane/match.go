package dataplane

import (
	"net/http"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ruleIndex finds a virtual host's first matching rule without trying
// every rule: a request's path names the few rules that can take it (an
// Exact rule of that path, a PathPrefix rule of one of its element
// prefixes) besides the rules the path cannot rule out (regular
// expressions). Those candidates are tried in precedence order, the rules'
// order in the configuration, so the answer is the scan's: the first rule
// that matches, by its method, headers and query too. With 10,000 routes
// of distinct paths on one host a request tries a handful of rules, not
// 10,000.
type ruleIndex struct {
	rules []*rule
	// exact and prefix are rules' positions by path: an Exact rule's value;
	// a PathPrefix rule's value without its trailing slash ("" for "/").
	exact  map[string][]int32
	prefix map[string][]int32
	// other are the rules a path alone cannot rule out.
	other []int32
}

func newRuleIndex(rules []*rule) *ruleIndex {
	x := &ruleIndex{rules: rules, exact: map[string][]int32{}, prefix: map[string][]int32{}}
	for i, ru := range rules {
		switch ru.path {
		case gwv1.PathMatchExact:
			x.exact[ru.value] = append(x.exact[ru.value], int32(i))
		case gwv1.PathMatchPathPrefix:
			p := strings.TrimSuffix(ru.value, "/")
			x.prefix[p] = append(x.prefix[p], int32(i))
		default:
			x.other = append(x.other, int32(i))
		}
	}
	return x
}

// maxLists bounds the candidate lists kept on the stack: a path of more
// elements than that is matched by the rules' own test on a scan of the
// rest.
const maxLists = 16

// fewRules is how many rules a scan tries faster than the index finds
// its candidates (BenchmarkRouterRoutes).
const fewRules = 8

// match is the first rule, in precedence order, that matches req; nil when
// none does.
func (x *ruleIndex) match(req *http.Request) *rule {
	if len(x.rules) <= fewRules {
		return x.scan(req)
	}
	return x.lookup(req)
}

// scan tries every rule in order.
func (x *ruleIndex) scan(req *http.Request) *rule {
	for _, ru := range x.rules {
		if ru.matches(req) {
			return ru
		}
	}
	return nil
}

// lookup tries the candidates of req's path in order.
func (x *ruleIndex) lookup(req *http.Request) *rule {
	path := req.URL.Path
	if path == "" {
		path = "/"
	}
	var lists [maxLists][]int32
	n := 0
	add := func(l []int32) {
		if len(l) > 0 && n < maxLists {
			lists[n] = l
			n++
		}
	}
	add(x.other)
	add(x.exact[path])
	// A PathPrefix rule P takes path when path is P or begins with P
	// followed by "/": P is path itself or path up to one of its slashes.
	overflow := false
	for i := 0; i < len(path); i++ {
		if path[i] != '/' {
			continue
		}
		if l := x.prefix[path[:i]]; len(l) > 0 {
			if n == maxLists {
				overflow = true
				break
			}
			add(l)
		}
	}
	if l := x.prefix[path]; len(l) > 0 {
		if n == maxLists {
			overflow = true
		}
		add(l)
	}
	if overflow {
		// More candidate lists than kept: try every rule.
		return x.scan(req)
	}
	// Merge the sorted lists, smallest position first.
	var pos [maxLists]int
	for {
		best, at := int32(-1), -1
		for k := range n {
			if pos[k] < len(lists[k]) {
				if v := lists[k][pos[k]]; best < 0 || v < best {
					best, at = v, k
				}
			}
		}
		if at < 0 {
			return nil
		}
		pos[at]++
		if ru := x.rules[best]; ru.matches(req) {
			return ru
		}
	}
}

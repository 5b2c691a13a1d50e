package accessreview

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// reviews answers from a script: one error per call while errs lasts, then
// allowed for the paths in allow and denied for the others.
type reviews struct {
	mu    sync.Mutex
	errs  []error
	allow map[string]bool
	asked []authorizationv1.SubjectAccessReviewSpec
}

func (r *reviews) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, sar.Spec)
	if len(r.errs) > 0 {
		err := r.errs[0]
		r.errs = r.errs[1:]
		return nil, err
	}
	out := sar.DeepCopy()
	if nr := sar.Spec.NonResourceAttributes; nr != nil && r.allow[nr.Path] {
		out.Status.Allowed = true
	} else {
		out.Status.Denied, out.Status.Reason = true, "not allowed"
	}
	return out, nil
}

func (r *reviews) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

func get(path string, groups ...string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "scraper", UID: "u1", Groups: groups, Extra: map[string][]string{"k": {"v"}}}, Verb: "get", Path: path}
}

// Answers are kept for their TTL: an allow for AllowTTL, a deny for
// DenyTTL; after it the API server is asked again.
func TestAnswersAreKeptForTheirTTL(t *testing.T) {
	r := &reviews{allow: map[string]bool{"/metrics": true}}
	a := New(Options{Reviews: r, AllowTTL: 10 * time.Second, DenyTTL: 2 * time.Second})
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	ctx := context.Background()
	check := func(path string, want authorizer.Decision, wantCalls int) {
		t.Helper()
		got, _, err := a.Authorize(ctx, get(path))
		if err != nil || got != want {
			t.Fatalf("Authorize(%s) = %v, %v; want %v", path, got, err, want)
		}
		if n := r.calls(); n != wantCalls {
			t.Fatalf("after Authorize(%s): %d reviews, want %d", path, n, wantCalls)
		}
	}
	check("/metrics", authorizer.DecisionAllow, 1)
	check("/metrics", authorizer.DecisionAllow, 1)
	check("/configz", authorizer.DecisionDeny, 2)
	check("/configz", authorizer.DecisionDeny, 2)
	now = now.Add(3 * time.Second) // past DenyTTL, within AllowTTL
	check("/metrics", authorizer.DecisionAllow, 2)
	check("/configz", authorizer.DecisionDeny, 3)
	now = now.Add(10 * time.Second)
	check("/metrics", authorizer.DecisionAllow, 4)
}

// The review carries who asks and for what.
func TestReviewSpec(t *testing.T) {
	r := &reviews{}
	a := New(Options{Reviews: r})
	if _, _, err := a.Authorize(context.Background(), get("/debug/pprof/", "g1")); err != nil {
		t.Fatal(err)
	}
	res := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "n"}, Verb: "list", Namespace: "ns", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Subresource: "scale", Name: "x", ResourceRequest: true}
	if _, _, err := a.Authorize(context.Background(), res); err != nil {
		t.Fatal(err)
	}
	if len(r.asked) != 2 {
		t.Fatalf("%d reviews, want 2", len(r.asked))
	}
	nr := r.asked[0]
	if nr.User != "scraper" || nr.UID != "u1" || len(nr.Groups) != 1 || nr.Groups[0] != "g1" || nr.Extra["k"][0] != "v" ||
		nr.ResourceAttributes != nil || nr.NonResourceAttributes == nil || *nr.NonResourceAttributes != (authorizationv1.NonResourceAttributes{Path: "/debug/pprof/", Verb: "get"}) {
		t.Errorf("non-resource review = %+v", nr)
	}
	rs := r.asked[1]
	want := authorizationv1.ResourceAttributes{Namespace: "ns", Verb: "list", Group: "apps", Version: "v1", Resource: "deployments", Subresource: "scale", Name: "x"}
	if rs.NonResourceAttributes != nil || rs.ResourceAttributes == nil || *rs.ResourceAttributes != want {
		t.Errorf("resource review = %+v", rs)
	}
}

// A review that failed for a passing reason is tried again within the
// backoff's steps; one the API server refused is not; one never made is no
// opinion with its error.
func TestFailedReviews(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("busy")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
	backoff := wait.Backoff{Duration: time.Microsecond, Factor: 1, Steps: 3}
	tests := []struct {
		name      string
		errs      []error
		want      authorizer.Decision
		wantErr   bool
		wantCalls int
	}{
		{name: "passing, then answered", errs: []error{unavailable, errors.New("connection refused")}, want: authorizer.DecisionAllow, wantCalls: 3},
		{name: "passing every time", errs: []error{unavailable, unavailable, unavailable}, want: authorizer.DecisionNoOpinion, wantErr: true, wantCalls: 3},
		{name: "refused", errs: []error{forbidden}, want: authorizer.DecisionNoOpinion, wantErr: true, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &reviews{errs: tc.errs, allow: map[string]bool{"/metrics": true}}
			a := New(Options{Reviews: r, AllowTTL: time.Minute, DenyTTL: time.Minute, Backoff: backoff})
			got, _, err := a.Authorize(context.Background(), get("/metrics"))
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("Authorize = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			if n := r.calls(); n != tc.wantCalls {
				t.Errorf("%d reviews, want %d", n, tc.wantCalls)
			}
		})
	}
}

func TestPrivilegedGroups(t *testing.T) {
	p := PrivilegedGroups("system:masters")
	for _, tc := range []struct {
		groups []string
		want   authorizer.Decision
	}{
		{[]string{"system:authenticated", "system:masters"}, authorizer.DecisionAllow},
		{[]string{"system:authenticated"}, authorizer.DecisionNoOpinion},
	} {
		if got, _, _ := p.Authorize(context.Background(), get("/metrics", tc.groups...)); got != tc.want {
			t.Errorf("groups %v: %v, want %v", tc.groups, got, tc.want)
		}
	}
}

// Package accessreview authorizes requests to the secure port by asking the
// API server: one SubjectAccessReview per request not answered recently,
// with answers kept for a while, as a delegated authorizer must. It needs
// only the typed SubjectAccessReview client, so the serving code does not
// link the apiserver's general webhook authorizer and its policy language.
package accessreview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Reviews creates SubjectAccessReviews; the typed client's
// AuthorizationV1().SubjectAccessReviews() is one.
type Reviews interface {
	Create(ctx context.Context, review *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// maxRemembered bounds the answers kept: beyond it, expired ones are
// dropped, and if none has expired, all of them (a scrape per interval per
// caller is what the secure port sees; thousands of distinct callers within
// a TTL is not).
const maxRemembered = 8192

// Options configure an Authorizer.
type Options struct {
	// Reviews is where the reviews are created.
	Reviews Reviews
	// AllowTTL is how long an allowed answer is kept, DenyTTL a denied
	// one (or one with no opinion); 0 keeps none.
	AllowTTL, DenyTTL time.Duration
	// Backoff spaces the attempts at a review that failed for a reason a
	// retry may cure (the API server unreachable, overloaded, throttling);
	// its Steps is the number of attempts. Zero: one attempt.
	Backoff wait.Backoff
}

// Authorizer is a delegated authorizer. It is safe for concurrent use. It
// has no conditional decisions: Authorizer.Authorizer offers it as an
// authorizer.Authorizer that says so.
type Authorizer struct {
	opts Options
	now  func() time.Time

	mu         sync.Mutex
	remembered map[string]answer
}

type answer struct {
	decision authorizer.Decision
	reason   string
	until    time.Time
}

// New returns an Authorizer that asks through o.Reviews.
func New(o Options) *Authorizer {
	return &Authorizer{opts: o, now: time.Now, remembered: map[string]answer{}}
}

// Authorizer offers a as an authorizer.Authorizer, for a union with others.
func (a *Authorizer) Authorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(a.Authorize)
}

// Authorize implements authorizer.UnconditionalAuthorizer. The API
// server's allowed is an Allow, its denied a Deny, anything else no
// opinion; a review that cannot be made is no opinion with its error, so
// that the next authorizer of a union may still decide.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	spec := reviewSpec(attrs)
	keyBytes, err := json.Marshal(spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("encoding the access review: %w", err)
	}
	key := string(keyBytes)
	if ans, ok := a.recall(key); ok {
		return ans.decision, ans.reason, nil
	}
	status, err := a.review(ctx, spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	ans := answer{decision: authorizer.DecisionNoOpinion, reason: status.Reason}
	ttl := a.opts.DenyTTL
	switch {
	case status.Allowed:
		ans.decision, ttl = authorizer.DecisionAllow, a.opts.AllowTTL
	case status.Denied:
		ans.decision = authorizer.DecisionDeny
	}
	if status.EvaluationError != "" && ans.decision != authorizer.DecisionAllow {
		// An evaluation error may be the API server's passing trouble:
		// not kept, asked again next time.
		ttl = 0
	}
	a.remember(key, ans, ttl)
	return ans.decision, ans.reason, nil
}

// review creates one SubjectAccessReview, trying again after the backoff's
// steps while the failure may be passing.
func (a *Authorizer) review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	backoff := a.opts.Backoff
	for {
		got, err := a.opts.Reviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err == nil {
			return got.Status, nil
		}
		if backoff.Steps <= 1 || !passing(err) || ctx.Err() != nil {
			return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("asking the API server for a SubjectAccessReview: %w", err)
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("asking the API server for a SubjectAccessReview: %w (then %w)", err, ctx.Err())
		}
	}
}

// passing tells whether err may go away on its own: anything but an API
// answer that the request itself is wrong or forbidden.
func passing(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer: the connection, a timeout
	}
	code := status.Status().Code
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}

func (a *Authorizer) recall(key string) (answer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ans, ok := a.remembered[key]
	if !ok {
		return answer{}, false
	}
	if !a.now().Before(ans.until) {
		delete(a.remembered, key)
		return answer{}, false
	}
	return ans, true
}

func (a *Authorizer) remember(key string, ans answer, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	now := a.now()
	ans.until = now.Add(ttl)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.remembered) >= maxRemembered {
		for k, old := range a.remembered {
			if !now.Before(old.until) {
				delete(a.remembered, k)
			}
		}
		if len(a.remembered) >= maxRemembered {
			clear(a.remembered)
		}
	}
	a.remembered[key] = ans
}

// reviewSpec is the review of one request: who asks (user, UID, groups,
// extra) and for what (a resource, or a path and verb).
func reviewSpec(attrs authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := attrs.GetUser(); u != nil {
		spec.User, spec.UID = u.GetName(), u.GetUID()
		spec.Groups = slices.Clone(u.GetGroups())
		if extra := u.GetExtra(); len(extra) > 0 {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				spec.Extra[k] = slices.Clone(v)
			}
		}
	}
	if attrs.IsResourceRequest() {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace:   attrs.GetNamespace(),
			Verb:        attrs.GetVerb(),
			Group:       attrs.GetAPIGroup(),
			Version:     attrs.GetAPIVersion(),
			Resource:    attrs.GetResource(),
			Subresource: attrs.GetSubresource(),
			Name:        attrs.GetName(),
		}
	} else {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: attrs.GetPath(), Verb: attrs.GetVerb()}
	}
	return spec
}

// PrivilegedGroups allows every request of a user in one of groups and has
// no opinion on the others.
func PrivilegedGroups(groups ...string) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
		if u := attrs.GetUser(); u != nil {
			for _, g := range u.GetGroups() {
				if slices.Contains(groups, g) {
					return authorizer.DecisionAllow, "", nil
				}
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

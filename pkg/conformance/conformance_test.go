package conformance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"
)

// spy is upstream's fake cloud recording what the suite hands it.
type spy struct {
	*fakecloud.Cloud
	mu          sync.Mutex
	initialized cloudprovider.ControllerClientBuilder
	annotations map[string]string
	asked       []string // providerIDs InstanceExists was asked about
	allRoutes   bool     // ListRoutes ignores the cluster name
}

func (s *spy) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initialized = b
}

func (s *spy) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return s, true }
func (s *spy) Routes() (cloudprovider.Routes, bool)             { return s, true }
func (s *spy) Instances() (cloudprovider.Instances, bool)       { return s, true }

func (s *spy) EnsureLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	s.mu.Lock()
	s.annotations = svc.Annotations
	s.mu.Unlock()
	return s.Cloud.EnsureLoadBalancer(ctx, cluster, svc, nodes)
}

func (s *spy) InstanceExistsByProviderID(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	s.asked = append(s.asked, id)
	s.mu.Unlock()
	return s.Cloud.InstanceExistsByProviderID(ctx, id)
}

func (s *spy) ListRoutes(ctx context.Context, cluster string) ([]*cloudprovider.Route, error) {
	var out []*cloudprovider.Route
	for _, r := range s.RouteMap {
		if s.allRoutes || r.ClusterName == cluster {
			rc := r.Route
			out = append(out, &rc)
		}
	}
	return out, nil
}

type builder struct {
	cloudprovider.ControllerClientBuilder
}

func result(rs []Result, capability, name string) *Result {
	for i := range rs {
		if rs[i].Capability == capability && strings.Contains(rs[i].Name, name) {
			return &rs[i]
		}
	}
	return nil
}

func TestRunOptions(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{ProviderID: "fake://n1"}}
	newSpy := func() *spy {
		return &spy{Cloud: &fakecloud.Cloud{ExistsByProviderID: false, ExternalIP: []byte{198, 18, 0, 9},
			Zone: cloudprovider.Zone{FailureDomain: "z", Region: "r"}, RouteMap: map[string]*fakecloud.Route{}}}
	}
	tests := []struct {
		name  string
		opts  Options
		setup func(*spy)
		check func(t *testing.T, s *spy, rs []Result)
	}{{
		name: "v1-only provider runs the instance cases through the adapter",
		check: func(t *testing.T, s *spy, rs []Result) {
			if r := result(rs, "Instances", "InstanceExists is false"); r == nil || !r.Passed() {
				t.Errorf("instance case: %+v", r)
			}
		},
	}, {
		name: "unknown provider ID given",
		opts: Options{UnknownProviderID: "fake:///zone-a/i-0fffffffffffffff0"},
		check: func(t *testing.T, s *spy, rs []Result) {
			if len(s.asked) == 0 || s.asked[0] != "fake:///zone-a/i-0fffffffffffffff0" {
				t.Errorf("InstanceExists asked about %v", s.asked)
			}
		},
	}, {
		name: "annotations and Initialize",
		opts: Options{ServiceAnnotations: map[string]string{"example.com/lb-type": "nlb"}, ClientBuilder: builder{}},
		check: func(t *testing.T, s *spy, rs []Result) {
			if s.annotations["example.com/lb-type"] != "nlb" {
				t.Errorf("test Service annotations %v", s.annotations)
			}
			if s.initialized == nil {
				t.Error("Initialize was not called with the client builder")
			}
			if r := result(rs, "Identity", "Initialize"); r == nil || !r.Passed() {
				t.Errorf("Initialize case: %+v", r)
			}
		},
	}, {
		name: "a skip is not a pass; a required skip fails",
		opts: Options{Require: []string{"Routes", "no such case"}},
		check: func(t *testing.T, s *spy, rs []Result) {
			r := result(rs, "Routes", "route round trip")
			if r == nil || r.Failure == "" || !strings.Contains(r.Failure, "required (--require Routes) but skipped") {
				t.Errorf("required skipped case: %+v", r)
			}
			if r := result(rs, "Required", "no such case"); r == nil || r.Failure == "" {
				t.Errorf("a requirement matching nothing: %+v", r)
			}
			// Not required: skipped, neither passed nor failed.
			if r := result(rs, "Instances", "cases for existing instances"); r == nil || r.Passed() || r.Failure != "" || r.Skipped == "" {
				t.Errorf("a skipped case: %+v", r)
			}
		},
	}, {
		name: "routes of one cluster listed under another fail the isolation case",
		opts: Options{Nodes: []*corev1.Node{node}, Capabilities: []string{"Routes"}},
		setup: func(s *spy) {
			s.allRoutes = true
			s.ExistsByProviderID = true
		},
		check: func(t *testing.T, s *spy, rs []Result) {
			r := result(rs, "Routes", "round trip")
			if r == nil || !strings.Contains(r.Failure, `ListRoutes("outrigger-conformance-other") lists the route`) {
				t.Errorf("isolation: %+v", r)
			}
			if result(rs, "Instances", "") != nil || result(rs, "LoadBalancer", "") != nil {
				t.Errorf("cases outside --capability ran: %+v", rs)
			}
		},
	}, {
		name: "routes kept apart pass",
		opts: Options{Nodes: []*corev1.Node{node}, Capabilities: []string{"Routes"}},
		check: func(t *testing.T, s *spy, rs []Result) {
			if r := result(rs, "Routes", "round trip"); r == nil || !r.Passed() {
				t.Errorf("round trip: %+v", r)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpy()
			if tt.setup != nil {
				tt.setup(s)
			}
			tt.opts.CallTimeout = 5 * time.Second
			rs := Run(context.Background(), s, tt.opts)
			tt.check(t, s, rs)
		})
	}
}

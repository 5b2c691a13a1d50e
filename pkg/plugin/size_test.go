package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// gRPC refuses a message for its size with RESOURCE_EXHAUSTED, the code of
// a throttle too. Read as a throttle it would be retried after a hint
// forever and slow every call of its family; it is a failure that says so.
func TestMessageTooLargeIsNotAThrottle(t *testing.T) {
	for _, tt := range []struct {
		name      string
		message   string
		trailer   metadata.MD
		tooLarge  bool
		throttled bool
	}{
		{"Go server", "grpc: received message larger than max (17204311 vs. 4194304)", nil, true, false},
		{"Go client", "grpc: trying to send message larger than max (17204311 vs. 4194304)", nil, true, false},
		{"Go, decompressed", "grpc: received message after decompression larger than max 4194304", nil, true, false},
		{"Node.js", "Received message larger than max (17204311 vs. 4194304)", nil, true, false},
		{"Java", "gRPC message exceeds maximum size 4194304: 17204311", nil, true, false},
		{"throttle with a hint", "slow down", metadata.Pairs(MetadataRetryAfter, "250"), false, true},
		{"throttle without a hint", "rate exceeded", nil, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := fromStatus("EnsureLoadBalancer", status.Error(codes.ResourceExhausted, tt.message), tt.trailer)
			if got := errors.Is(err, ErrMessageTooLarge); got != tt.tooLarge {
				t.Errorf("%v: ErrMessageTooLarge %v, want %v", err, got, tt.tooLarge)
			}
			if _, got := provider.RetryAfter(err); got != tt.throttled {
				t.Errorf("%v: throttled %v, want %v", err, got, tt.throttled)
			}
			if tt.tooLarge && provider.Reason(err) != ReasonMessageTooLarge {
				t.Errorf("%v: reason %q, want %q", err, provider.Reason(err), ReasonMessageTooLarge)
			}
		})
	}
}

func TestSplitBySize(t *testing.T) {
	node := func(n int) []byte { return []byte(strings.Repeat("x", n)) }
	// Each 100-byte node is 102 bytes on the wire (tag and length).
	nodes := [][]byte{node(100), node(100), node(100), node(500), node(100)}
	var got []int
	for _, part := range splitBySize(nodes, 250) {
		got = append(got, len(part))
	}
	// The 500-byte node is over the budget alone: a run of its own.
	if fmt.Sprint(got) != "[2 1 1 1]" {
		t.Errorf("runs of %v nodes, want [2 1 1 1]", got)
	}
	if parts := splitBySize(nil, 250); len(parts) != 1 || len(parts[0]) != 0 {
		t.Errorf("no nodes split into %v, want one empty run (one call)", parts)
	}
}

// recorder is a load balancer provider that counts its calls.
type recorder struct {
	fakecloud.Cloud
	calls int
}

func (r *recorder) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return r, true }
func (r *recorder) EnsureLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	r.calls++
	return &corev1.LoadBalancerStatus{}, nil
}

// A stream that ends early never reaches the provider: acting on part of
// the backends would take the others out of the load balancer.
func TestIncompleteBackendStreamChangesNothing(t *testing.T) {
	svc, _ := encodeService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}})
	nodeJSON, _ := encodeNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	canceled := status.Error(codes.Canceled, "context canceled")
	named := func(name string) []byte {
		b, _ := encodeNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}})
		return b
	}
	ref := func(name string) *pluginpb.NodeRef { return &pluginpb.NodeRef{Name: name, ResourceVersion: "1"} }
	for _, tt := range []struct {
		name   string
		stream []*pluginpb.EnsureLoadBalancerRequest
		end    error
		want   codes.Code
	}{
		{"cancelled", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 3, Nodes: [][]byte{nodeJSON}}}, canceled, codes.Canceled},
		{"nodes lost", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 3, Nodes: [][]byte{nodeJSON}}, {Nodes: [][]byte{nodeJSON}}}, io.EOF, codes.InvalidArgument},
		{"empty", nil, io.EOF, codes.InvalidArgument},
		{"complete", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 2, Nodes: [][]byte{nodeJSON}}, {Nodes: [][]byte{nodeJSON}}}, io.EOF, codes.OK},
		{"refs complete, carried in full", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 2, NodeCacheSession: "s", NodeRefs: []*pluginpb.NodeRef{ref("a")}},
			{NodeRefs: []*pluginpb.NodeRef{ref("b")}, Nodes: [][]byte{named("a"), named("b")}}}, io.EOF, codes.OK},
		{"refs lost", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 3, NodeCacheSession: "s", NodeRefs: []*pluginpb.NodeRef{ref("a"), ref("b")},
			Nodes: [][]byte{named("a"), named("b")}}}, io.EOF, codes.InvalidArgument},
		{"ref to a node never sent", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 2, NodeCacheSession: "s", NodeRefs: []*pluginpb.NodeRef{ref("a"), ref("b")},
			Nodes: [][]byte{named("a")}}}, io.EOF, codes.FailedPrecondition},
		{"refs without a session", []*pluginpb.EnsureLoadBalancerRequest{{Service: svc, NodeCount: 0, NodeRefs: []*pluginpb.NodeRef{ref("a")}}}, io.EOF, codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &recorder{}
			s := NewServer(p, Info{}).(*server)
			i := 0
			recv := func() (*pluginpb.EnsureLoadBalancerRequest, error) {
				if i == len(tt.stream) {
					return nil, tt.end
				}
				i++
				return tt.stream[i-1], nil
			}
			_, _, nodes, err := s.receiveBackends(context.Background(), recv)
			if status.Code(err) != tt.want {
				t.Fatalf("err %v, want code %s", err, tt.want)
			}
			if err == nil && len(nodes) != 2 {
				t.Errorf("%d nodes, want 2", len(nodes))
			}
		})
	}
}

// MaxAnswerBytes holds ListRoutes of 50,000 dual-stack nodes (100,000
// routes, each as the route controller makes it) three times over.
func TestMaxAnswerHoldsTheRoutesOfLargeClusters(t *testing.T) {
	resp := &pluginpb.ListRoutesResponse{}
	for i := range 100_000 {
		name := fmt.Sprintf("node-%06d.compute.internal", i)
		resp.Routes = append(resp.Routes, toRoute(&cloudprovider.Route{
			Name: fmt.Sprintf("cluster-3f2a6c1e-0000-4000-8000-%012d-198-19-%d-%d-24", i, i>>8&255, i&255), TargetNode: types.NodeName(name),
			TargetNodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.%d.%d", i>>8&255, i&255)}, {Type: corev1.NodeHostName, Address: name}},
			DestinationCIDR:     fmt.Sprintf("198.19.%d.%d/24", i>>8&255, i&255),
		}))
	}
	size := proto.Size(resp)
	t.Logf("%d routes: %d bytes, %d a route", len(resp.Routes), size, size/len(resp.Routes))
	if 3*size > MaxAnswerBytes {
		t.Errorf("ListRoutes of %d routes is %d bytes, over a third of MaxAnswerBytes %d", len(resp.Routes), size, MaxAnswerBytes)
	}
}

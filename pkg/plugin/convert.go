package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// ProtocolVersion is the protocol version this package speaks.
const ProtocolVersion = "v1"

// Trailing metadata keys of the error protocol.
const (
	MetadataReason     = "outrigger-reason"
	MetadataRetryAfter = "retry-after-ms"
	// ReasonImplementedElsewhere is cloudprovider.ImplementedElsewhere.
	ReasonImplementedElsewhere = "ImplementedElsewhere"
)

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return b, nil
}

// lastApplied is kubectl's copy of an object it applied: a second copy of
// the object, which no provider reads.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// forProvider is what a plugin receives of a Node: its name, UID,
// resourceVersion, creation and deletion times, labels and annotations
// (without kubectl's last-applied copy), the whole spec (providerID, pod
// CIDRs, taints, unschedulable) and of its status the addresses,
// conditions, node info, capacity, allocatable, phase and daemon endpoints.
// Left out is what grows with a node's workload and history and no
// provider reads: managedFields, status.images (a kubelet reports up to 50,
// each with its digests), the volumes in use and attached, and the rest of
// the metadata and status. That is a fifth of a kubelet's Node (2.7 KB of
// 13.6 KB for a node with 50 images), so that load balancers with thousands
// of backends stay cheap to send and to decode.
func forProvider(n *corev1.Node) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
			Labels: n.Labels, Annotations: withoutLastApplied(n.Annotations),
		},
		Spec: n.Spec,
		Status: corev1.NodeStatus{
			Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable, Phase: n.Status.Phase,
			Conditions: n.Status.Conditions, Addresses: n.Status.Addresses,
			DaemonEndpoints: n.Status.DaemonEndpoints, NodeInfo: n.Status.NodeInfo,
		},
	}
}

// serviceForProvider is the Service without managedFields and kubectl's
// last-applied copy; a provider reads everything else of a Service (its
// annotations configure the load balancer).
func serviceForProvider(s *corev1.Service) *corev1.Service {
	out := *s
	out.ManagedFields = nil
	out.Annotations = withoutLastApplied(s.Annotations)
	return &out
}

func withoutLastApplied(m map[string]string) map[string]string {
	if _, ok := m[lastApplied]; !ok {
		return m // shared, never written: encoding only reads it
	}
	out := make(map[string]string, len(m)-1)
	for k, v := range m {
		if k != lastApplied {
			out[k] = v
		}
	}
	return out
}

func encodeNode(n *corev1.Node) ([]byte, error) {
	return encode(forProvider(n))
}

func encodeService(s *corev1.Service) ([]byte, error) {
	return encode(serviceForProvider(s))
}

func decodeNode(b []byte) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := json.Unmarshal(b, n); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "node is not a JSON core/v1 Node: %v", err)
	}
	return n, nil
}

func decodeNodes(bs [][]byte) ([]*corev1.Node, error) {
	out := make([]*corev1.Node, 0, len(bs))
	for _, b := range bs {
		n, err := decodeNode(b)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func encodeNodes(nodes []*corev1.Node) ([][]byte, error) {
	out := make([][]byte, 0, len(nodes))
	for _, n := range nodes {
		b, err := encodeNode(n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func decodeService(b []byte) (*corev1.Service, error) {
	s := &corev1.Service{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "service is not a JSON core/v1 Service: %v", err)
	}
	return s, nil
}

func toMetadata(md *cloudprovider.InstanceMetadata) *pluginpb.InstanceMetadata {
	if md == nil {
		return nil
	}
	out := &pluginpb.InstanceMetadata{
		ProviderId: md.ProviderID, InstanceType: md.InstanceType, Zone: md.Zone, Region: md.Region,
		AdditionalLabels: md.AdditionalLabels,
	}
	for _, a := range md.NodeAddresses {
		out.NodeAddresses = append(out.NodeAddresses, &pluginpb.NodeAddress{Type: string(a.Type), Address: a.Address})
	}
	return out
}

func fromMetadata(md *pluginpb.InstanceMetadata) *cloudprovider.InstanceMetadata {
	if md == nil {
		return nil
	}
	out := &cloudprovider.InstanceMetadata{
		ProviderID: md.ProviderId, InstanceType: md.InstanceType, Zone: md.Zone, Region: md.Region,
		AdditionalLabels: md.AdditionalLabels,
	}
	for _, a := range md.NodeAddresses {
		out.NodeAddresses = append(out.NodeAddresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return out
}

func toRoute(r *cloudprovider.Route) *pluginpb.Route {
	out := &pluginpb.Route{Name: r.Name, TargetNode: string(r.TargetNode), DestinationCidr: r.DestinationCIDR, Blackhole: r.Blackhole}
	for _, a := range r.TargetNodeAddresses {
		out.TargetNodeAddresses = append(out.TargetNodeAddresses, &pluginpb.NodeAddress{Type: string(a.Type), Address: a.Address})
	}
	return out
}

func fromRoute(r *pluginpb.Route) *cloudprovider.Route {
	if r == nil {
		return &cloudprovider.Route{}
	}
	out := &cloudprovider.Route{Name: r.Name, TargetNode: types.NodeName(r.TargetNode), DestinationCIDR: r.DestinationCidr, Blackhole: r.Blackhole}
	for _, a := range r.TargetNodeAddresses {
		out.TargetNodeAddresses = append(out.TargetNodeAddresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return out
}

// toStatus turns a provider's error into the wire's: a code and, where it
// helps, the reason and retry-after trailers.
func toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	trailer := metadata.MD{}
	code := codes.Unknown
	switch {
	case errors.Is(err, cloudprovider.InstanceNotFound):
		code = codes.NotFound
	case errors.Is(err, cloudprovider.NotImplemented):
		code = codes.Unimplemented
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		trailer.Set(MetadataReason, ReasonImplementedElsewhere)
	} else if reason := provider.Reason(err); reason != provider.ReasonCloudError && reason != provider.ReasonNotImplemented {
		trailer.Set(MetadataReason, reason)
	}
	if after, ok := provider.RetryAfter(err); ok {
		code = codes.ResourceExhausted
		trailer.Set(MetadataRetryAfter, strconv.FormatInt(after.Milliseconds(), 10))
	}
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
	return status.Error(code, err.Error())
}

// MessageBudget is the most bytes Outrigger puts in one message to a
// plugin: below the 4 MiB a gRPC server (Go, C++, Java, Node.js) accepts
// by default, with room for gRPC's own framing. A message goes over it only
// when one object alone does (the API server stores none over 1.5 MiB).
const MessageBudget = 3 << 20

// MaxAnswerBytes is the largest answer Outrigger accepts from a plugin
// (gRPC's default is 4 MiB). The only answer that grows with the cluster is
// ListRoutes, about 190 bytes a route: 64 MiB holds 350,000 routes, three
// times the 100,000 of 50,000 dual-stack nodes.
const MaxAnswerBytes = 64 << 20

// MaxObjectAnswerBytes is the largest answer about one object (a load
// balancer's status, an instance's metadata) Outrigger accepts: far above
// any real one, and small enough that hundreds of workers waiting on a
// plugin that answers too much hold megabytes, not gigabytes. A larger
// answer fails its call with the reason MessageTooLarge.
const MaxObjectAnswerBytes = 1 << 20

// ReasonMessageTooLarge classifies ErrMessageTooLarge.
const ReasonMessageTooLarge = "MessageTooLarge"

// ErrMessageTooLarge is a call whose request or answer was larger than a
// side of the boundary accepts: gRPC's RESOURCE_EXHAUSTED "message larger
// than max". Retrying does not fix it, so it is a failure with
// ReasonMessageTooLarge, not a throttle.
var ErrMessageTooLarge = errors.New("message larger than the plugin boundary accepts")

// tooLarge says whether a RESOURCE_EXHAUSTED is gRPC's own refusal of a
// message for its size, in the words of gRPC's implementations: Go, C++
// and Node.js say "larger than max", Java "exceeds maximum size". A plugin's
// throttle carries retry-after-ms; without it, the message decides.
func tooLarge(st *status.Status, trailer metadata.MD) bool {
	if st.Code() != codes.ResourceExhausted || first(trailer.Get(MetadataRetryAfter)) != "" {
		return false
	}
	msg := strings.ToLower(st.Message())
	return strings.Contains(msg, "larger than max") || strings.Contains(msg, "exceeds maximum size")
}

// nodeBytes is what one encoded node adds to a message's size on the wire
// (the nodes field's tag and length, then the JSON).
func nodeBytes(b []byte) int {
	return protowire.SizeTag(3) + protowire.SizeBytes(len(b))
}

// refBytes is what one node ref adds to a message's size on the wire.
func refBytes(r *pluginpb.NodeRef) int {
	return protowire.SizeTag(5) + protowire.SizeBytes(proto.Size(r))
}

// splitBySize splits encoded nodes, in order, into runs of at most budget
// bytes on the wire (a node larger than that alone is a run of its own).
func splitBySize(nodes [][]byte, budget int) [][][]byte {
	var out [][][]byte
	start, size := 0, 0
	for i, b := range nodes {
		if n := nodeBytes(b); size+n > budget && i > start {
			out = append(out, nodes[start:i])
			start, size = i, n
		} else {
			size += n
		}
	}
	if start < len(nodes) || len(out) == 0 {
		out = append(out, nodes[start:])
	}
	return out
}

// throttledError is a plugin's RESOURCE_EXHAUSTED: the call layer pauses
// all callers for RetryAfter, as for an in-process provider.
type throttledError struct {
	msg   string
	after time.Duration
}

func (e *throttledError) Error() string             { return e.msg }
func (e *throttledError) RetryAfter() time.Duration { return e.after }

// fromStatus turns a plugin's error back into what an in-process provider
// would have returned.
func fromStatus(method string, err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	msg := fmt.Sprintf("plugin %s: %s", method, st.Message())
	reason := first(trailer.Get(MetadataReason))
	var out error
	switch st.Code() {
	case codes.NotFound:
		out = fmt.Errorf("%s: %w", msg, cloudprovider.InstanceNotFound)
	case codes.Unimplemented:
		out = fmt.Errorf("%s: %w", msg, cloudprovider.NotImplemented)
	case codes.ResourceExhausted:
		if tooLarge(st, trailer) {
			out = provider.WithReason(ReasonMessageTooLarge, fmt.Errorf("%s: %w", msg, ErrMessageTooLarge))
			break
		}
		after := time.Second
		if ms, err := strconv.ParseInt(first(trailer.Get(MetadataRetryAfter)), 10, 64); err == nil && ms >= 0 {
			// A trailer too large for a Duration would wrap negative;
			// one past MaxRetryAfter would park the object for that long.
			after = min(time.Duration(min(ms, int64(math.MaxInt64/time.Millisecond)))*time.Millisecond, MaxRetryAfter)
		}
		out = &throttledError{msg: msg, after: after}
	case codes.DeadlineExceeded:
		out = fmt.Errorf("%s: %w", msg, context.DeadlineExceeded)
	default:
		out = errors.New(msg)
	}
	if reason != "" && !validReason(reason) {
		// It would become a condition's reason, which the API server
		// refuses: the status write would fail and hide the real error.
		out = fmt.Errorf("%w (the plugin's %s %.64q is not a valid reason: ignored)", out, MetadataReason, reason)
		reason = ""
	}
	switch reason {
	case "":
	case ReasonImplementedElsewhere:
		out = fmt.Errorf("%w: %w", out, cloudprovider.ImplementedElsewhere)
	default:
		out = provider.WithReason(reason, out)
	}
	return out
}

// MaxRetryAfter bounds a plugin's retry-after-ms: the longest an object is
// held back after its calls time out in a row, so that no answer parks an
// object longer than the call layer itself would.
const MaxRetryAfter = 5 * time.Minute

// reasonForm is the form of a condition's reason (metav1.Condition):
// CamelCase words, digits, ',', ':' and '_'.
var reasonForm = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// validReason reports whether r may be a condition's reason: its form, at
// most 1024 characters.
func validReason(r string) bool { return len(r) <= 1024 && reasonForm.MatchString(r) }

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

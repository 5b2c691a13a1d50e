package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
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
		b, err := encode(n)
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
		after := time.Second
		if ms, err := strconv.ParseInt(first(trailer.Get(MetadataRetryAfter)), 10, 64); err == nil && ms >= 0 {
			// A trailer too large for a Duration would wrap negative.
			after = time.Duration(min(ms, int64(math.MaxInt64/time.Millisecond))) * time.Millisecond
		}
		out = &throttledError{msg: msg, after: after}
	case codes.DeadlineExceeded:
		out = fmt.Errorf("%s: %w", msg, context.DeadlineExceeded)
	default:
		out = errors.New(msg)
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

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

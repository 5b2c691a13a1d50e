package plugin

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// FuzzWireToProvider feeds what crosses the plugin boundary, from a plugin
// Outrigger does not control or from Outrigger to a plugin, through the
// conversions to provider objects: protobuf messages (instance metadata,
// routes, statuses), the JSON Nodes, Services and LoadBalancerStatuses
// inside them, and an error's code, message and trailers. Nothing panics;
// what does not decode is an error that says what it expected.
func FuzzWireToProvider(f *testing.F) {
	md, _ := proto.Marshal(&pluginpb.InstanceMetadata{ProviderId: "sim://1", Zone: "z",
		NodeAddresses: []*pluginpb.NodeAddress{{Type: "InternalIP", Address: "198.18.0.1"}}})
	route, _ := proto.Marshal(&pluginpb.Route{Name: "r", TargetNode: "n", DestinationCidr: "198.18.0.0/24"})
	f.Add(md, []byte(`{"metadata":{"name":"n"}}`), uint32(codes.ResourceExhausted), "slow down", "250", "")
	f.Add(route, []byte(`{"ingress":[{"ip":"192.0.2.1"}]}`), uint32(codes.NotFound), "gone", "", ReasonImplementedElsewhere)
	f.Add([]byte{0x0a, 0xff}, []byte(`{"spec":{"ports":[{"port":"x"}]}}`), uint32(99), "", "-5", "InvalidAnnotation")
	f.Add([]byte{}, []byte(" "), uint32(codes.Unimplemented), "\xff", "9223372036854775807", "")
	f.Add([]byte{}, []byte("null"), uint32(codes.ResourceExhausted), "", "9223372036854775807", "")
	f.Add([]byte{}, []byte("{}"), uint32(codes.ResourceExhausted), "grpc: received message larger than max (5 vs. 4)", "", "")
	f.Fuzz(func(t *testing.T, msg, object []byte, code uint32, message, retryAfter, reason string) {
		var pmd pluginpb.InstanceMetadata
		if proto.Unmarshal(msg, &pmd) == nil {
			if got := fromMetadata(&pmd); got == nil || got.ProviderID != pmd.ProviderId {
				t.Fatalf("metadata %v converted to %v", &pmd, got)
			}
		}
		var pr pluginpb.Route
		if proto.Unmarshal(msg, &pr) == nil {
			if got := fromRoute(&pr); got.DestinationCIDR != pr.DestinationCidr {
				t.Fatalf("route %v converted to %v", &pr, got)
			}
		}
		if _, err := decodeNode(object); err != nil && !strings.Contains(err.Error(), "not a JSON core/v1 Node") {
			t.Fatalf("unclear error: %v", err)
		}
		if _, err := decodeService(object); err != nil && !strings.Contains(err.Error(), "not a JSON core/v1 Service") {
			t.Fatalf("unclear error: %v", err)
		}
		if _, err := decodeStatus(object); err != nil && !strings.Contains(err.Error(), "not a JSON core/v1 LoadBalancerStatus") {
			t.Fatalf("unclear error: %v", err)
		}
		err := fromStatus("Method", status.Error(codes.Code(code), message), metadata.Pairs(MetadataRetryAfter, retryAfter, MetadataReason, reason))
		if code == uint32(codes.OK) {
			return // status.Error gives no error for OK
		}
		if err == nil || !strings.HasPrefix(err.Error(), "plugin Method: ") {
			t.Fatalf("code %d %q converted to %v", code, message, err)
		}
		var te *throttledError
		if errors.As(err, &te) && (te.RetryAfter() < 0 || te.RetryAfter() > MaxRetryAfter) {
			t.Fatalf("retry-after %s from %q, outside 0 to %s", te.RetryAfter(), retryAfter, MaxRetryAfter)
		}
		if r := provider.Reason(err); r != "" && !validReason(r) {
			t.Fatalf("reason %q from %q is not a condition's reason", r, reason)
		}
		if errors.Is(err, ErrMessageTooLarge) && errors.As(err, &te) {
			t.Fatalf("code %d %q: a message too large reads as a throttle too: %v", code, message, err)
		}
	})
}

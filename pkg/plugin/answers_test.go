package plugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// A plugin's answer is not trusted past what Outrigger can use: a reason
// the API server would refuse as a condition's is dropped for the default
// one (and said in the error), and a retry hint longer than the longest
// hold is cut to it.
func TestPluginAnswersBounded(t *testing.T) {
	for _, tc := range []struct {
		name, reason, retryAfter string
		wantReason               string
		wantAfter                time.Duration
		wantInMessage            string
	}{
		{"valid reason", "QuotaExceeded", "", "QuotaExceeded", 0, ""},
		{"reason with a space", "Quota Exceeded", "", "CloudError", 0, `"Quota Exceeded" is not a valid reason`},
		{"reason with a newline", "Bad\nReason", "", "CloudError", 0, "is not a valid reason"},
		{"reason too long", strings.Repeat("A", 1025), "", "CloudError", 0, "is not a valid reason"},
		{"reason of 1024", strings.Repeat("A", 1024), "", strings.Repeat("A", 1024), 0, ""},
		{"hint within", "", "1500", "Throttled", 1500 * time.Millisecond, ""},
		{"hint of a day", "", "86400000", "Throttled", MaxRetryAfter, ""},
		{"hint past a Duration", "", "9223372036854775807", "Throttled", MaxRetryAfter, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, md := codes.Internal, metadata.Pairs(MetadataReason, tc.reason)
			if tc.retryAfter != "" {
				code, md = codes.ResourceExhausted, metadata.Pairs(MetadataRetryAfter, tc.retryAfter)
			}
			err := fromStatus("EnsureLoadBalancer", status.Error(code, "cloud said no"), md)
			if got := provider.Reason(err); got != tc.wantReason {
				t.Errorf("reason %q, want %q", got, tc.wantReason)
			}
			if !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Errorf("error %q does not say %q", err, tc.wantInMessage)
			}
			var te *throttledError
			if tc.wantAfter > 0 && (!errors.As(err, &te) || te.RetryAfter() != tc.wantAfter) {
				t.Errorf("error %v: retry after %v, want %v", err, te, tc.wantAfter)
			}
		})
	}
}

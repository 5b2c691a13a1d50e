package manager

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
)

// TestCallTimeoutUnderProviderMain: Outrigger's own binary cuts a cloud
// call at 30 s by default; under a provider's own main (an Extension,
// package app) the default is no deadline, as upstream's app.Run, so that
// OCI's and OpenStack's load balancer calls, which wait minutes on the
// cloud's work requests, finish; --cloud-call-timeout given holds in both.
func TestCallTimeoutUnderProviderMain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		extension bool
		args      []string
		want      time.Duration
	}{
		{"own binary, default", false, nil, 30 * time.Second},
		{"own binary, given", false, []string{"--cloud-call-timeout=5m"}, 5 * time.Minute},
		{"provider's main, default", true, nil, cloud.NoTimeout},
		{"provider's main, given", true, []string{"--cloud-call-timeout=5m"}, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if tc.extension {
				o.Extension = &Extension{}
			}
			if got := o.callLayer().Timeout; got != tc.want {
				t.Errorf("call timeout = %v, want %v", got, tc.want)
			}
		})
	}
}

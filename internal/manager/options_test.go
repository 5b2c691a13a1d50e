package manager

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestEnabledControllers(t *testing.T) {
	tests := []struct {
		flag    []string
		want    []string
		wantErr string
	}{
		{flag: []string{"*"}, want: []string{"cloud-node-controller", "cloud-node-lifecycle-controller", "service-lb-controller", "node-ipam-controller", "node-route-controller", "gateway-controller"}},
		{flag: []string{"*", "-cloud-node-lifecycle-controller"}, want: []string{"cloud-node-controller", "service-lb-controller", "node-ipam-controller", "node-route-controller", "gateway-controller"}},
		{flag: []string{"cloud-node-lifecycle-controller"}, want: []string{"cloud-node-lifecycle-controller"}},
		{flag: []string{"*", "-service-lb-controller", "-node-route-controller"}, want: []string{"cloud-node-controller", "cloud-node-lifecycle-controller", "node-ipam-controller", "gateway-controller"}},
		{flag: []string{}, want: nil},
		{flag: []string{"service-lb-controller"}, want: []string{"service-lb-controller"}},
		{flag: []string{"*", "-cloud-node", "-service"}, want: []string{"cloud-node-lifecycle-controller", "node-ipam-controller", "node-route-controller", "gateway-controller"}},
		{flag: []string{"cloud-node", "cloud-node-lifecycle", "route"}, want: []string{"cloud-node-controller", "cloud-node-lifecycle-controller", "node-route-controller"}},
		{flag: []string{"*", "-routes"}, wantErr: `unknown controller "-routes"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.flag, ","), func(t *testing.T) {
			o := NewOptions()
			o.Controllers = tc.flag
			got, err := o.EnabledControllers()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestValidateReportsEveryProblemOnOneLine(t *testing.T) {
	o := NewOptions()
	o.ConcurrentNodeSyncs = 0
	o.Serving.BindPort = 70000
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"--cloud-provider is required", "--concurrent-node-syncs must be positive", "--secure-port 70000"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
}

// The call layer gets its ceilings and timeout from the flags, and shares
// answers about an instance for no longer than the lifecycle monitor's
// period: with a shorter --node-monitor-period the monitor must not be
// given an answer older than its own pass.
func TestCallLayerOptionsFromFlags(t *testing.T) {
	tests := []struct {
		args            []string
		wantQPS         float64
		wantBurst       int
		wantShareWindow time.Duration
		wantNoBatch     bool
	}{
		{args: nil, wantShareWindow: 5 * time.Second},
		{args: []string{"--node-monitor-period=1s"}, wantShareWindow: time.Second},
		{args: []string{"--cloud-qps=20", "--cloud-burst=40", "--node-monitor-period=30s"}, wantQPS: 20, wantBurst: 40, wantShareWindow: 30 * time.Second},
		{args: []string{"--feature-gates=BatchInstanceLookups=false"}, wantShareWindow: 5 * time.Second, wantNoBatch: true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = featureGate.Set("BatchInstanceLookups=true") })
			got := o.callLayer()
			if got.QPS != tc.wantQPS || got.Burst != tc.wantBurst || got.ShareWindow != tc.wantShareWindow || got.NoBatch != tc.wantNoBatch {
				t.Errorf("call layer options %+v, want QPS %v, burst %d, share window %v, no batch %v", got, tc.wantQPS, tc.wantBurst, tc.wantShareWindow, tc.wantNoBatch)
			}
		})
	}
}

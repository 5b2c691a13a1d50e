package manager

import (
	"slices"
	"strings"
	"testing"
)

func TestEnabledControllers(t *testing.T) {
	tests := []struct {
		flag    []string
		want    []string
		wantErr string
	}{
		{flag: []string{"*"}, want: []string{"cloud-node-controller", "cloud-node-lifecycle-controller", "service-lb-controller", "node-ipam-controller", "node-route-controller"}},
		{flag: []string{"*", "-cloud-node-lifecycle-controller"}, want: []string{"cloud-node-controller", "service-lb-controller", "node-ipam-controller", "node-route-controller"}},
		{flag: []string{"cloud-node-lifecycle-controller"}, want: []string{"cloud-node-lifecycle-controller"}},
		{flag: []string{"*", "-service-lb-controller", "-node-route-controller"}, want: []string{"cloud-node-controller", "cloud-node-lifecycle-controller", "node-ipam-controller"}},
		{flag: []string{}, want: nil},
		{flag: []string{"service-lb-controller"}, want: []string{"service-lb-controller"}},
		{flag: []string{"*", "-cloud-node", "-service"}, want: []string{"cloud-node-lifecycle-controller", "node-ipam-controller", "node-route-controller"}},
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

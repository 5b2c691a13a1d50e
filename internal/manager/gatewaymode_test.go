package manager

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// --gateway-namespace-mode is parsed when flags are: shared by default,
// gateway when asked, and a mistyped value stops the command naming the
// flag and the values it takes.
func TestGatewayNamespaceModeFlag(t *testing.T) {
	tests := []struct {
		args    []string
		want    gateway.NamespaceMode
		wantErr string
	}{
		{args: nil, want: gateway.NamespaceShared},
		{args: []string{"--gateway-namespace-mode=shared"}, want: gateway.NamespaceShared},
		{args: []string{"--gateway-namespace-mode=gateway"}, want: gateway.NamespaceGateway},
		{args: []string{"--gateway-namespace-mode=per-gateway"}, wantErr: `"per-gateway" for "--gateway-namespace-mode" flag: "per-gateway" is not a namespace mode: want shared or gateway`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			err := fs.Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.GatewayNamespaceMode != tc.want {
				t.Errorf("mode %q, want %q", o.GatewayNamespaceMode, tc.want)
			}
			if got := o.controllerConfig(nil).GatewayInGatewayNamespace; got != (tc.want == gateway.NamespaceGateway) {
				t.Errorf("controllers told GatewayInGatewayNamespace=%v for mode %q", got, tc.want)
			}
		})
	}
}

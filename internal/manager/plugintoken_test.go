package manager

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

// TestPluginServiceAccountFlags: --plugin-service-account is parsed once,
// into a namespace and a name, when given; a malformed one is refused by
// the flag set, and it comes with --plugin-api-access-dir or not at all.
func TestPluginServiceAccountFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    string
		wantErr string
	}{
		{args: []string{"--plugin-service-account=kube-system/ccm-plugin", "--plugin-api-access-dir=/run/plugin"}, want: "kube-system/ccm-plugin"},
		{args: nil, want: ""},
		{args: []string{"--plugin-service-account=ccm-plugin", "--plugin-api-access-dir=/run/plugin"}, wantErr: "want NAMESPACE/NAME"},
		{args: []string{"--plugin-service-account=kube-system/", "--plugin-api-access-dir=/run/plugin"}, wantErr: "want NAMESPACE/NAME"},
		{args: []string{"--plugin-service-account=Kube_System/p", "--plugin-api-access-dir=/run/plugin"}, wantErr: "namespace:"},
		{args: []string{"--plugin-service-account=kube-system/a/b", "--plugin-api-access-dir=/run/plugin"}, wantErr: "name:"},
		{args: []string{"--plugin-service-account=kube-system/ccm-plugin"}, wantErr: "--plugin-service-account and --plugin-api-access-dir go together"},
		{args: []string{"--plugin-api-access-dir=/run/plugin"}, wantErr: "--plugin-service-account and --plugin-api-access-dir go together"},
		{args: []string{"--plugin-service-account=kube-system/ccm-plugin", "--plugin-api-access-dir=/run/plugin", "--tenants-namespace=tenants"}, wantErr: "does not go with tenant mode"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			err := fs.Parse(append([]string{"--cloud-provider=sim"}, tc.args...))
			if err == nil {
				err = o.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := o.PluginServiceAccount.String(); got != tc.want {
				t.Errorf("service account %q, want %q", got, tc.want)
			}
		})
	}
}

// TestThePluginTrustsTheAPIServerAsOutriggerDoes: the CA handed to the
// plugin is Outrigger's own, its file read at each call (rotated in place
// in a pod) or a kubeconfig's bytes; without one, Outrigger refuses to
// start rather than hand the plugin a token it cannot use.
func TestThePluginTrustsTheAPIServerAsOutriggerDoes(t *testing.T) {
	file := t.TempDir() + "/ca.crt"
	if err := writeString(file, "first"); err != nil {
		t.Fatal(err)
	}
	ca, err := caOf(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: file, CAData: []byte("ignored")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeString(file, "rotated"); err != nil {
		t.Fatal(err)
	}
	if got, err := ca(); err != nil || string(got) != "rotated" {
		t.Errorf("CA %q (%v), want the file as it is now", got, err)
	}
	ca, err = caOf(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte("bytes")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ca(); string(got) != "bytes" {
		t.Errorf("CA %q, want the kubeconfig's", got)
	}
	if _, err := caOf(&rest.Config{}); err == nil {
		t.Error("no CA accepted")
	}
}

func writeString(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

package tenants

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// TestFromSecret: the kubeconfig is read from Outrigger's key, else Cluster
// API's or Kamaji's; the version changes with any key read, and only then.
func TestFromSecret(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want string
	}{
		{"own key", map[string]string{"kubeconfig": "a", "value": "b"}, "a"},
		{"Cluster API's", map[string]string{"value": "b"}, "b"},
		{"Kamaji's", map[string]string{"admin.conf": "c"}, "c"},
		{"none", map[string]string{"other": "d"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(FromSecret(secret("t", tc.data)).Kubeconfig); got != tc.want {
				t.Errorf("kubeconfig %q, want %q", got, tc.want)
			}
		})
	}
	base := FromSecret(secret("t", map[string]string{"kubeconfig": "k", "cloud-config": "c", "account": " acct\n"}))
	if base.Account != "acct" || base.Secret != "t" || base.Source() != "Secret t" {
		t.Errorf("tenant %+v", base)
	}
	same := FromSecret(secret("t", map[string]string{"kubeconfig": "k", "cloud-config": "c", "account": "acct", "unread": "x"}))
	if same.Version != base.Version {
		t.Error("a key Outrigger does not read changed the version")
	}
	for _, changed := range []map[string]string{
		{"kubeconfig": "k2", "cloud-config": "c", "account": "acct"},
		{"kubeconfig": "k", "cloud-config": "c2", "account": "acct"},
		{"kubeconfig": "k", "cloud-config": "c", "account": "acct2"},
		{"kubeconfig": "kc", "cloud-config": "", "account": "acct"}, // bytes moved between keys
	} {
		if FromSecret(secret("t", changed)).Version == base.Version {
			t.Errorf("version unchanged by %v", changed)
		}
	}
}

// TestDefaultAccount: the same provider and credentials make one account,
// other credentials or another provider another.
func TestDefaultAccount(t *testing.T) {
	a := DefaultAccount("sim", []byte("endpoint: x\ntoken: 1\n"))
	if !strings.HasPrefix(a, "sim/") || a != DefaultAccount("sim", []byte("endpoint: x\ntoken: 1\n")) {
		t.Errorf("account %q not stable", a)
	}
	if a == DefaultAccount("sim", []byte("endpoint: x\ntoken: 2\n")) || a == DefaultAccount("aws", []byte("endpoint: x\ntoken: 1\n")) {
		t.Error("different credentials or providers share an account")
	}
}

// TestFromDir reads every regular file but dot files and directories (a
// projected volume's ..data), names them as Lease-safe labels, and a
// Secret's tenant of the same name wins over a file's.
func TestFromDir(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"Prod_East.yaml": "a", "dev.kubeconfig": "b", ".hidden": "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "..data"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "file-prod-east" || got[1].Name != "file-dev" || string(got[0].Kubeconfig) != "a" {
		t.Fatalf("tenants %+v", got)
	}
	if long := FileTenantName(strings.Repeat("x", 80) + ".yaml"); len(LeaseName(long)) > 63 {
		t.Errorf("Lease name %q longer than a label", LeaseName(long))
	}
	all, dropped := Merge([]Tenant{{Name: "file-dev", Secret: "file-dev"}, {Name: "a"}}, got)
	if len(all) != 3 || all[0].Name != "a" || all[1].Secret != "file-dev" || len(dropped) != 1 || dropped[0].File == "" {
		t.Errorf("merged %+v, dropped %+v", all, dropped)
	}
	if _, err := FromDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory read without error")
	}
}

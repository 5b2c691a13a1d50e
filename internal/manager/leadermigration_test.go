package manager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadMigrationConfig(t *testing.T) {
	const good = `kind: LeaderMigrationConfiguration
apiVersion: controllermanager.config.k8s.io/v1
leaderName: cloud-provider-extraction-migration
resourceLock: leases
controllerLeaders:
  - name: route
    component: "*"
  - name: service
    component: cloud-controller-manager
  - name: cloud-node-lifecycle
    component: kube-controller-manager
`
	tests := []struct {
		name, config, wantErr string
	}{
		{"good", good, ""},
		{"wrong kind", strings.Replace(good, "kind: LeaderMigrationConfiguration", "kind: Config", 1), "want LeaderMigrationConfiguration"},
		{"wrong group", strings.Replace(good, "controllermanager.config.k8s.io/v1", "v1", 1), "apiVersion"},
		{"endpoints lock", strings.Replace(good, "resourceLock: leases", "resourceLock: endpoints", 1), "only leases"},
		{"unknown controller", strings.Replace(good, "name: route", "name: ingress", 1), `unknown controller "ingress"`},
		{"no component", strings.Replace(good, `component: "*"`, `component: ""`, 1), "component is empty"},
		{"misspelt field", strings.Replace(good, "leaderName", "leaderNmae", 1), "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "migration.yaml")
			if err := os.WriteFile(path, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadMigrationConfig(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			roles := map[string]migrationRole{
				"node-route-controller":           roleMigrated,
				"service-lb-controller":           roleMigrated,
				"cloud-node-lifecycle-controller": roleOther,
				"cloud-node-controller":           roleMain,
				"node-ipam-controller":            roleMain,
			}
			for name, want := range roles {
				if got, _ := cfg.role(name); got != want {
					t.Errorf("role(%s) = %v, want %v", name, got, want)
				}
			}
		})
	}
	def, err := loadMigrationConfig("")
	if err != nil || def.LeaderName != "cloud-provider-extraction-migration" {
		t.Fatalf("default config: %+v, %v", def, err)
	}
	if role, _ := def.role("service-lb-controller"); role != roleMigrated {
		t.Error("the default config does not migrate service-lb-controller")
	}
}

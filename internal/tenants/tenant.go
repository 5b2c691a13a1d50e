package tenants

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The keys of a tenant's Secret.
const (
	// KeyKubeconfig holds the kubeconfig that reaches the tenant's API
	// server (required).
	KeyKubeconfig = "kubeconfig"
	// KeyCloudConfig holds the provider's configuration for this tenant,
	// its credentials included, so that no tenant's credentials live in
	// another's cluster or Secret. Absent: the process's --cloud-config.
	KeyCloudConfig = "cloud-config"
	// KeyAccount names the cloud account the tenant's calls are charged
	// to: tenants naming one account share one call budget. Absent: the
	// provider's name and a hash of the cloud-config (DefaultAccount).
	KeyAccount = "account"
)

// kubeconfigKeys are the keys a Secret's kubeconfig is read from, the first
// present: Outrigger's own, then those of the platforms that write such
// Secrets themselves, so that their Secrets can be selected as they are:
// Cluster API's <cluster>-kubeconfig ("value") and Kamaji's
// <name>-admin-kubeconfig ("admin.conf").
var kubeconfigKeys = []string{KeyKubeconfig, "value", "admin.conf"}

// Tenant is one cluster Outrigger serves, as read from its Secret or file.
type Tenant struct {
	// Name identifies the tenant among all of them: the Secret's name, or
	// for a file "file-" and the file's name made a DNS label.
	Name string
	// Secret is the Secret the tenant came from ("" for a file), where its
	// Events go.
	Secret string
	// File is the file the tenant came from ("" for a Secret).
	File string
	// Kubeconfig, CloudConfig and Account are the Secret's keys (a file
	// gives only Kubeconfig). Kubeconfig is nil when the key is missing,
	// which the tenant's run reports.
	Kubeconfig  []byte
	CloudConfig []byte
	Account     string
	// Version changes whenever any of the above does: a tenant whose
	// version changes is restarted.
	Version string
}

// FromSecret reads a tenant from its Secret. A Secret without a kubeconfig
// is still a tenant: its run fails and says so on the Secret, which an
// operator sees where they look.
func FromSecret(s *corev1.Secret) Tenant {
	t := Tenant{
		Name:        s.Name,
		Secret:      s.Name,
		Kubeconfig:  kubeconfigOf(s),
		CloudConfig: s.Data[KeyCloudConfig],
		Account:     strings.TrimSpace(string(s.Data[KeyAccount])),
	}
	t.Version = version(t)
	return t
}

func kubeconfigOf(s *corev1.Secret) []byte {
	for _, k := range kubeconfigKeys {
		if v, ok := s.Data[k]; ok {
			return v
		}
	}
	return nil
}

// FromDir reads a tenant from every regular file of dir whose name does not
// start with a dot (kubeconfig files, as a platform's operator or a
// projected volume writes them), sorted by name.
func FromDir(dir string) ([]Tenant, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading --tenants-dir: %w", err)
	}
	var out []Tenant
	for _, e := range entries {
		// A projected Secret volume links its files through dot-named
		// directories; the links themselves are what we read.
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading tenant file %s: %w", path, err)
		}
		t := Tenant{Name: FileTenantName(e.Name()), File: path, Kubeconfig: data}
		t.Version = version(t)
		out = append(out, t)
	}
	return out, nil
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// FileTenantName is the tenant name of a kubeconfig file: "file-" and the
// file's name without its extension, lower-cased, as a DNS label (it names
// the tenant's Lease).
func FileTenantName(file string) string {
	base := strings.TrimSuffix(file, filepath.Ext(file))
	base = strings.Trim(notLabel.ReplaceAllString(strings.ToLower(base), "-"), "-")
	name := "file-" + base
	if len(name) > validation.DNS1123LabelMaxLength-len(leasePrefix) {
		// Too long for a Lease name: cut, and keep it distinct by a hash.
		sum := sha256.Sum256([]byte(file))
		name = name[:validation.DNS1123LabelMaxLength-len(leasePrefix)-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return name
}

// DefaultAccount is the account of a tenant that names none: the provider's
// name and a hash of the cloud-config the tenant's provider is built from,
// its credentials included, so that tenants with the same credentials share
// a budget and tenants with different ones do not.
func DefaultAccount(provider string, cloudConfig []byte) string {
	sum := sha256.Sum256(cloudConfig)
	return provider + "/" + hex.EncodeToString(sum[:6])
}

// Merge joins the tenants of the Secrets and of the directory into one list
// sorted by name. A name given twice keeps the Secret's (a Secret is the
// platform's API; a file may be a leftover), and is returned in dropped.
func Merge(fromSecrets, fromDir []Tenant) (all []Tenant, dropped []Tenant) {
	seen := map[string]bool{}
	for _, t := range fromSecrets {
		seen[t.Name] = true
		all = append(all, t)
	}
	for _, t := range fromDir {
		if seen[t.Name] {
			dropped = append(dropped, t)
			continue
		}
		seen[t.Name] = true
		all = append(all, t)
	}
	slices.SortFunc(all, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	return all, dropped
}

// Source says where the tenant came from, for logs and Events.
func (t Tenant) Source() string {
	if t.Secret != "" {
		return "Secret " + t.Secret
	}
	return "file " + t.File
}

func version(t Tenant) string {
	h := sha256.New()
	for _, part := range [][]byte{t.Kubeconfig, t.CloudConfig, []byte(t.Account)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

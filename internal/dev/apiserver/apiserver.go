// Package apiserver starts a real Kubernetes API server (etcd and
// kube-apiserver) for `outrigger dev`, the integration tests and the
// benchmarks. It goes through controller-runtime's envtest, which knows how
// to configure and stop those binaries. The top-level controlplane/ module
// builds them from source (`make controlplane`), with the rest of a real
// cluster's binaries for cluster/.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubernetesVersion is the version of the API server the module builds.
const KubernetesVersion = "v1.37.2"

// binaries the control plane needs in the assets directory.
// binaries are what the control plane runs; kubectl, built beside them by
// `make controlplane`, is for people and the tests that run it.
var binaries = []string{"etcd", "kube-apiserver"}

// AssetsDir is where the built binaries are cached: $OUTRIGGER_ASSETS, else
// the user cache directory, keyed by version so an upgrade builds afresh.
func AssetsDir() string {
	if d := os.Getenv("OUTRIGGER_ASSETS"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "outrigger", "controlplane-"+KubernetesVersion)
}

// EnsureAssets returns the assets directory, building the binaries first if
// any is missing (several minutes, once per machine). Concurrent callers,
// such as test packages run in parallel, wait for one build.
func EnsureAssets(ctx context.Context) (string, error) {
	dir := AssetsDir()
	if complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating assets directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("locking assets directory: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking assets directory: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if complete(dir) {
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	// make says what it builds and how far it is, as `make controlplane`.
	args := []string{"-C", root, "ASSETS=" + dir, "PROGRESS_PREFIX=make controlplane"}
	for _, b := range binaries {
		args = append(args, filepath.Join(dir, b))
	}
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the control plane with 'make %s': %w", strings.Join(args, " "), err)
	}
	if !complete(dir) {
		return "", fmt.Errorf("building the control plane left %s incomplete", dir)
	}
	return dir, nil
}

func complete(dir string) bool {
	for _, b := range binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// repoRoot finds the repository (the directory holding controlplane/go.mod)
// from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "controlplane", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("control plane binaries are not built and the Outrigger repository (controlplane/go.mod) is not above the working directory: run 'make controlplane' in the repository or set OUTRIGGER_ASSETS")
		}
		dir = parent
	}
}

// ServiceCIDR is the API server's --service-cluster-ip-range: from
// 198.18.0.0/15, the benchmarking range, as every address the project uses.
const ServiceCIDR = "198.19.0.0/16"

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	// AuditLog is the API server's audit log (JSON lines), when started
	// WithAudit: every create, update, patch and delete, with its user, and
	// every request of a ServiceAccount in kube-system.
	AuditLog string
	// ServingCAFile is the CA of the API server's serving certificate and
	// of its client certificate towards kubelets (their client CA), when
	// started WithServingNames.
	ServingCAFile string
	auditDir      string
	certDir       string

	// An API server restarted after KillAPIServer (see faults.go).
	faultsMu      sync.Mutex
	apiServerArgs []string
	apiServer     *exec.Cmd
	apiServerDone chan struct{}
}

// Option changes how the control plane starts.
type Option func(*startOptions)

type startOptions struct {
	audit        bool
	servingNames []string
	args         [][2]string
}

// WithAudit makes the API server log every write with the user who made it,
// so tests can tell which identity wrote what.
func WithAudit() Option { return func(o *startOptions) { o.audit = true } }

// WithServingNames adds DNS names and IP addresses to the API server's
// serving certificate (which always names localhost and 127.0.0.1), for
// clients that reach it by another address: pods through the kubernetes
// Service, nodes in other network namespaces.
func WithServingNames(names ...string) Option {
	return func(o *startOptions) { o.servingNames = append(o.servingNames, names...) }
}

// WithAPIServerArg sets a kube-apiserver flag (name without dashes); an
// empty value leaves out the flag, even one envtest sets by default.
func WithAPIServerArg(name, value string) Option {
	return func(o *startOptions) { o.args = append(o.args, [2]string{name, value}) }
}

// auditPolicy logs writes at Metadata level (who, what, when), and every
// request of kube-system's ServiceAccounts (the identities deploy/ grants
// rights to: the RBAC test checks each granted verb is used), and nothing
// else, to keep the log small.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
- level: Metadata
  userGroups: ["system:serviceaccounts:kube-system"]
- level: None
`

// Start builds the binaries if needed and starts the control plane.
func Start(ctx context.Context, options ...Option) (*ControlPlane, error) {
	var so startOptions
	for _, o := range options {
		o(&so)
	}
	dir, err := EnsureAssets(ctx)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// envtest's default Service range (a /24) holds 254 Services; the load
	// balancer benchmark creates thousands.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", ServiceCIDR)
	cp := &ControlPlane{Env: env}
	if so.audit {
		if cp.auditDir, err = os.MkdirTemp("", "outrigger-audit-"); err != nil {
			return nil, fmt.Errorf("audit log directory: %w", err)
		}
		policy := filepath.Join(cp.auditDir, "policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, fmt.Errorf("writing the audit policy: %w", err)
		}
		cp.AuditLog = filepath.Join(cp.auditDir, "audit.log")
		env.ControlPlane.GetAPIServer().Configure().Set("audit-policy-file", policy).Set("audit-log-path", cp.AuditLog)
	}
	api := env.ControlPlane.GetAPIServer()
	for _, a := range so.args {
		if a[1] == "" {
			api.Configure().Disable(a[0])
		} else {
			api.Configure().Set(a[0], a[1])
		}
	}
	if len(so.servingNames) > 0 {
		// envtest keeps certificates it finds in CertDir and then leaves
		// the directory to its owner.
		var ca []byte
		if cp.certDir, ca, err = servingCerts(so.servingNames); err != nil {
			return nil, err
		}
		api.CertDir = cp.certDir
		api.SecureServing.CA = ca
		cp.ServingCAFile = filepath.Join(cp.certDir, "ca.crt")
		api.Configure().
			Set("kubelet-client-certificate", filepath.Join(cp.certDir, "kubelet-client.crt")).
			Set("kubelet-client-key", filepath.Join(cp.certDir, "kubelet-client.key"))
	}
	if cp.Config, err = env.Start(); err != nil {
		if cp.certDir != "" {
			_ = os.RemoveAll(cp.certDir)
		}
		return nil, fmt.Errorf("starting etcd and kube-apiserver from %s: %w", dir, err)
	}
	return cp, nil
}

// WriteAdminKubeconfig writes a kubeconfig for a cluster-admin user to path.
func (cp *ControlPlane) WriteAdminKubeconfig(path string) error {
	user, err := cp.Env.AddUser(envtest.User{Name: "outrigger-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("encoding the admin kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	return nil
}

// Stop stops the API server and etcd and removes their data.
func (cp *ControlPlane) Stop() error {
	// A paused etcd would never stop; an API server restarted by
	// StartAPIServer is not envtest's to stop.
	err := errors.Join(cp.stopRestarted(), resumeEtcdIfRunning())
	err = errors.Join(err, cp.Env.Stop())
	for _, d := range []string{cp.auditDir, cp.certDir} {
		if d != "" {
			err = errors.Join(err, os.RemoveAll(d))
		}
	}
	return err
}

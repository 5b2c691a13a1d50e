package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// Options configure a cluster.
type Options struct {
	// WorkDir holds the cluster's files; default /var/tmp/outrigger-cluster.
	WorkDir string
	// Nodes is how many nodes to run; default 2.
	Nodes int
	// OutriggerImage is Outrigger's image tarball (make image); imported
	// into every node and deployed with deploy/'s manifests. Unused when
	// Install is set.
	OutriggerImage string
	// OutriggerImageName is its name; default OutriggerImage.
	OutriggerImageName string
	// Assets holds the Kubernetes binaries; default
	// apiserver.AssetsDir().
	Assets string
	// Images are OCI tarballs to import into every node's containerd
	// (the pause image among them); none: pods cannot start.
	Images []string
	// LogDir receives every process's log; default WorkDir/logs (removed
	// with the cluster).
	LogDir string
	// Out receives progress; default os.Stderr.
	Out io.Writer
	// Hybrid makes the even-numbered nodes the sim cloud's instances
	// (providerID sim://<ID>), served by the harness, and has one Outrigger
	// run the local and sim providers (hybrid.go).
	Hybrid bool
	// Install, when set, installs Outrigger in place of deploy/'s
	// manifests and the imported image (say, Helm's chart with the image
	// pulled from a registry the cluster serves, ServeRegistry). It runs
	// once the nodes and their pod networks are up; Up then waits for
	// Outrigger to initialize every node.
	Install func(ctx context.Context, c *Cluster) error
	// GatewayAPIChannel is the channel of the Gateway API CRDs installed
	// with deploy/'s manifests; default the standard one.
	GatewayAPIChannel gatewayapi.Channel
	// GatewayNamespaceMode is where Outrigger makes each Gateway's data
	// plane (--gateway-namespace-mode): default shared, in
	// outrigger-gateways; gateway, in the Gateway's own namespace, with
	// deploy/rbac-gateway-namespaces.yaml applied too.
	GatewayNamespaceMode gateway.NamespaceMode
}

// PauseImage is the sandbox image every node's containerd is configured
// with; the harness builds it from source (controlplane/images).
const PauseImage = "outrigger.local/pause:1"

// Cluster is a running cluster.
type Cluster struct {
	opts  Options
	state *State
	nodes []node
	cp    *apiserver.ControlPlane
	// Config is the admin's REST config (host loopback).
	Config *rest.Config
	// Kubeconfig is the admin's kubeconfig file (host loopback).
	Kubeconfig string
	Client     kubernetes.Interface

	mu    sync.Mutex
	procs []*proc
	fwd   []net.Listener
	// apiPort is the API server's port, on the host's loopback and on
	// BridgeIP (the forwarder).
	apiPort string
	release func()
	// agents are each node's kubelet and kube-proxy, restarted with its
	// instance; instances the local cloud's state of each node's machine.
	agents    map[string][]agent
	instances map[string]string
	// router forwards VIP traffic to the nodes (router.go).
	router     *router
	stopRouter func()
	// sim is the sim cloud of a hybrid cluster, simIDs its instance for
	// each sim node (by name).
	sim    *simcloud.Cloud
	simIDs map[string]string
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Nodes returns the names of the cluster's nodes.
func (c *Cluster) Nodes() []string {
	var names []string
	for _, n := range c.nodes {
		names = append(names, n.Name)
	}
	return names
}

// NodeIP returns the address of the named node.
func (c *Cluster) NodeIP(name string) string {
	for _, n := range c.nodes {
		if n.Name == name {
			return n.IP
		}
	}
	return ""
}

// APIServerAddress is where the API server is reached from the network
// namespaces (BridgeIP and its port): the address its serving certificate
// names and the kubernetes Service's endpoint.
func (c *Cluster) APIServerAddress() string { return net.JoinHostPort(BridgeIP, c.apiPort) }

// HarnessNetns is the network namespace the harness's clients (and
// Outrigger) live in: from there node IPs and VIPs are reachable.
func HarnessNetns() string { return harnessNS }

func (o *Options) defaults() {
	if o.WorkDir == "" {
		o.WorkDir = defaultWork
	}
	o.WorkDir = filepath.Clean(o.WorkDir)
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.OutriggerImage == "" {
		o.OutriggerImage = "bin/outrigger-image.tar"
	}
	if o.OutriggerImageName == "" {
		o.OutriggerImageName = OutriggerImage
	}
	if o.Assets == "" {
		o.Assets = apiserver.AssetsDir()
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.WorkDir, "logs")
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
}

// ClusterBinaries are the binaries Up needs in the assets directory besides
// the control plane's; `make cluster-binaries` builds them.
var ClusterBinaries = []string{"kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler"}

// ClusterImages are the image tarballs Up needs among Options.Images; `make
// cluster-images` builds them: the pods' pause container, agnhost for
// workloads, CoreDNS.
var ClusterImages = []string{"pause.tar", "agnhost.tar", "coredns.tar"}

// Preflight says why Up cannot run here, or nil.
func Preflight(o Options) error {
	o.defaults()
	if os.Geteuid() != 0 {
		return errors.New("a real cluster needs root (network namespaces, mounts, cgroups)")
	}
	for _, b := range append([]string{"etcd", "kube-apiserver"}, ClusterBinaries...) {
		if _, err := os.Stat(filepath.Join(o.Assets, b)); err != nil {
			return fmt.Errorf("%s is not built in %s: run 'make cluster-binaries'", b, o.Assets)
		}
	}
	if _, err := os.Stat(o.OutriggerImage); err != nil && o.Install == nil {
		return fmt.Errorf("the Outrigger image %s: %w (run 'make image')", o.OutriggerImage, err)
	}
	for _, name := range ClusterImages {
		if !slices.ContainsFunc(o.Images, func(p string) bool { return filepath.Base(p) == name }) {
			return fmt.Errorf("no %s among the images to import (%v): run 'make cluster-images' and pass its directory's tarballs", name, o.Images)
		}
	}
	return nil
}

// Up cleans up what an earlier run left, then starts the cluster and waits
// until Outrigger has initialized every node. On error, what was started is
// removed. Down stops it.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	o.defaults()
	if err := Preflight(o); err != nil {
		return nil, err
	}
	if err := EnsurePackages(ctx, o.Out); err != nil {
		return nil, err
	}
	release, err := Lock(o.WorkDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if c == nil {
			release()
		}
	}()
	if old, err := LoadState(o.WorkDir); err != nil {
		return nil, err
	} else if old != nil {
		fmt.Fprintf(o.Out, "Removing what an earlier run left (state file %s)\n", StatePath(o.WorkDir))
		if err := Cleanup(old, o.Out); err != nil {
			return nil, fmt.Errorf("cleaning up an earlier run: %w", err)
		}
	}
	if _, err := os.Stat(o.WorkDir); err == nil {
		return nil, fmt.Errorf("%s exists and no state file says it is ours: remove it", o.WorkDir)
	}
	c = &Cluster{opts: o, state: &State{WorkDir: o.WorkDir}, release: release, agents: map[string][]agent{}, instances: map[string]string{}}
	for i := 1; i <= o.Nodes; i++ {
		platform := PlatformLocal
		if o.Hybrid && i%2 == 0 {
			platform = PlatformSim
		}
		c.nodes = append(c.nodes, newNode(o.WorkDir, i, platform))
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(o.Out, "Starting failed (%v); removing what was started\n", err)
			_ = c.Down()
			c = nil
		}
	}()
	if err := c.state.save(); err != nil {
		return c, err
	}
	type step struct {
		name string
		fn   func(context.Context) error
	}
	simCloud := step{"the sim cloud's API (its instances: the even nodes)", c.startSimCloud}
	if !o.Hybrid {
		simCloud.fn = nil
	}
	install := step{"Outrigger from its image (deploy/*.yaml)", c.deployOutrigger}
	if o.Install != nil {
		install = step{"Outrigger installed (Options.Install)", func(ctx context.Context) error { return o.Install(ctx, c) }}
	}
	steps := []step{
		{"cgroups", c.setupCgroups},
		{"control plane (etcd, kube-apiserver)", c.startControlPlane},
		{"network namespaces, bridge, veths", c.setupNetwork},
		{"API server forwarder in the harness namespace", c.startForwarder},
		{"the local cloud's instance API", c.startInstanceAPI},
		simCloud,
		{"the local cloud's router for VIPs (ECMP to healthy nodes)", c.startRouter},
		{"kube-controller-manager, kube-scheduler", c.startControllers},
		{"nodes: containerd, images, kubelet, kube-proxy", c.startNodes},
		{"pod networks (CNI config from spec.podCIDR, routes)", c.setupPodNetworks},
		install,
		{"nodes initialized by Outrigger", c.waitInitialized},
		{"cluster DNS (CoreDNS)", c.deployDNS},
	}
	for _, s := range steps {
		if s.fn == nil {
			continue
		}
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return c, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(o.Out, "ok  %-55s %s\n", s.name, time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

// Down stops every process and removes everything the cluster made.
func (c *Cluster) Down() error {
	var errs []error
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	// Newest first: nodes before the controllers before the API server;
	// a polite SIGTERM, then the cgroup sweep of Cleanup kills the rest
	// (containers, shims) with SIGKILL.
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	for i := len(procs) - 1; i >= 0; i-- {
		select {
		case <-procs[i].done:
		case <-time.After(10 * time.Second):
		}
	}
	// The pods next (they live under each node's cgroup root): their
	// connections to the API server would hold up its graceful stop.
	if c.state.CgroupBase != "" {
		for _, n := range c.nodes {
			if _, err := killCgroupTree(filepath.Join(c.state.CgroupBase, n.Name)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.stopRouter != nil {
		c.stopRouter()
	}
	for _, l := range c.fwd {
		_ = l.Close()
	}
	if c.cp != nil {
		errs = append(errs, c.cp.Stop())
	}
	errs = append(errs, Cleanup(c.state, c.opts.Out))
	if c.release != nil {
		c.release()
	}
	return errors.Join(errs...)
}

// run runs a short command, returning its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// start starts a long-running process with its log in LogDir.
func (c *Cluster) start(name string, args ...string) (*proc, error) {
	if err := os.MkdirAll(c.opts.LogDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(c.opts.LogDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a Ctrl-C in the terminal reaches only the
	// harness, which stops everything in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// exited says whether p has exited, with the tail of its log.
func (c *Cluster) exited(p *proc) error {
	select {
	case <-p.done:
		data, _ := os.ReadFile(filepath.Join(c.opts.LogDir, p.name+".log"))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		return fmt.Errorf("%s exited (%v); log tail:\n%s", p.name, p.cmd.ProcessState, data)
	default:
		return nil
	}
}

// setupCgroups makes the cgroup every process of the cluster runs under,
// inside this process's own memory cgroup so that the machine's memory
// accounting still holds, and moves this process there (pids hierarchy):
// every child, and every container, inherits it.
func (c *Cluster) setupCgroups(context.Context) error {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	parent := "/"
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && (f[1] == "memory" || (f[0] == "0" && parent == "/")) {
			parent = f[2]
		}
		if len(f) == 3 && (f[1] == "pids" || (f[0] == "0" && c.state.HarnessCgroup == "")) {
			c.state.HarnessCgroup = f[2]
		}
	}
	c.state.CgroupBase = filepath.Join(parent, cgroupLeaf)
	if err := c.state.save(); err != nil {
		return err
	}
	roots, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	leaves := []string{"harness"}
	for _, n := range c.nodes {
		leaves = append(leaves, n.Name)
	}
	for _, r := range roots {
		for _, leaf := range leaves {
			made, err := mkCgroup(r, filepath.Join(c.state.CgroupBase, leaf))
			c.state.CgroupDirs = append(c.state.CgroupDirs, made...)
			if serr := c.state.save(); err == nil {
				err = serr
			}
			if err != nil {
				return err
			}
		}
	}
	self := strconv.Itoa(os.Getpid())
	return os.WriteFile(filepath.Join(pidsHierarchy(), c.state.CgroupBase, "harness", "cgroup.procs"), []byte(self), 0o644)
}

// mkCgroup makes path (and its parents) in the hierarchy at root; a v1
// cpuset directory holds no process until it is given CPUs and memory
// nodes, so those are copied from its parent.
func mkCgroup(root, path string) (made []string, _ error) {
	dir := root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err == nil {
			made = append(made, dir)
		} else if !errors.Is(err, os.ErrExist) {
			return made, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
				cur, _ := os.ReadFile(filepath.Join(dir, f))
				if strings.TrimSpace(string(cur)) == "" {
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return made, fmt.Errorf("setting %s of %s: %w", f, dir, err)
					}
				}
			}
		}
	}
	return made, nil
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	if err := os.MkdirAll(c.opts.WorkDir, 0o755); err != nil {
		return err
	}
	egress := filepath.Join(c.opts.WorkDir, "egress-selector.yaml")
	if err := os.WriteFile(egress, []byte(egressConfig(c.egressSocket())), 0o644); err != nil {
		return err
	}
	cp, err := apiserver.Start(ctx,
		apiserver.WithServingNames(append([]string{BridgeIP}, KubernetesServiceNames...)...),
		// The kubernetes Service's endpoint: the forwarder, which pods
		// reach through their node.
		apiserver.WithAPIServerArg("advertise-address", BridgeIP),
		apiserver.WithAPIServerArg("service-cluster-ip-range", ServiceCIDR),
		apiserver.WithAPIServerArg("egress-selector-config-file", egress),
		// Pods get their ServiceAccount's token (envtest turns the
		// admission plugin off).
		apiserver.WithAPIServerArg("disable-admission-plugins", ""),
		// Node names resolve nowhere; their InternalIP is on the bridge.
		apiserver.WithAPIServerArg("kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname"),
	)
	if err != nil {
		return err
	}
	c.cp = cp
	// envtest removes these on Stop; recorded for a run killed before.
	if d := cp.Env.ControlPlane.APIServer.CertDir; d != "" {
		_ = c.state.addDir(d)
	}
	if d := cp.Env.ControlPlane.Etcd.DataDir; d != "" {
		_ = c.state.addDir(d)
	}
	c.Config = cp.Config
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		return err
	}
	c.apiPort = u.Port()
	c.Kubeconfig = filepath.Join(c.opts.WorkDir, "admin.kubeconfig")
	if err := cp.WriteAdminKubeconfig(c.Kubeconfig); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Config = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// userKubeconfig writes a kubeconfig for a user of the given groups. Through
// the forwarder (from the namespaces) it names the API server "localhost",
// the name its serving certificate holds.
func (c *Cluster) userKubeconfig(file, user string, groups []string, forwarded bool) error {
	u, err := c.cp.Env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return fmt.Errorf("adding user %s: %w", user, err)
	}
	rc := u.Config()
	cluster := &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	if forwarded {
		cluster.Server = "https://" + net.JoinHostPort(BridgeIP, c.apiPort)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = cluster
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	kc.Contexts["cluster"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: user}
	kc.CurrentContext = "cluster"
	return clientcmd.WriteToFile(*kc, file)
}

func (c *Cluster) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, cond)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

func hasUninitializedTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == "node.cloudprovider.kubernetes.io/uninitialized" {
			return true
		}
	}
	return false
}

// waitInitialized waits until every node has registered and Outrigger has
// initialized it: a provider ID, and no uninitialized taint.
func (c *Cluster) waitInitialized(ctx context.Context) error {
	return c.waitUntil(ctx, 3*time.Minute, "Outrigger to initialize every node", func(ctx context.Context) (bool, error) {
		for _, n := range c.nodes {
			got, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil || got.Spec.ProviderID == "" || hasUninitializedTaint(got) {
				return false, c.anyExited()
			}
		}
		return true, nil
	})
}

// anyExited returns an error when a process of the cluster has died, so
// that waits fail fast with its log instead of timing out.
func (c *Cluster) anyExited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if err := c.exited(p); err != nil {
			return err
		}
	}
	return nil
}

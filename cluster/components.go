package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.Assets, name) }

// startControllers starts kube-controller-manager as in a cluster with an
// external cloud provider: no cloud controllers, node CIDRs allocated from
// ClusterCIDR; and kube-scheduler. Both run in the host namespace, on the
// API server's loopback address, and serve nothing.
func (c *Cluster) startControllers(ctx context.Context) error {
	kcm, err := c.start("kube-controller-manager", c.bin("kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig,
		"--cloud-provider=external",
		// Every default controller: since 1.37 kube-controller-manager has
		// no cloud controllers to leave out (naming one is an error).
		"--controllers=*",
		"--allocate-node-cidrs=true",
		"--cluster-cidr="+ClusterCIDR,
		fmt.Sprintf("--node-cidr-mask-size=%d", NodeCIDRMaskSize),
		"--service-cluster-ip-range="+ServiceCIDR,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		// A stopped node turns NotReady in seconds, not 50 s (kubelets
		// renew their lease every 2.5 s), so lifecycle tests are quick.
		"--node-monitor-grace-period=16s",
		"--node-monitor-period=2s",
		"--v=2",
	)
	if err != nil {
		return err
	}
	sched, err := c.start("kube-scheduler", c.bin("kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--v=2",
	)
	if err != nil {
		return err
	}
	return c.waitUntil(ctx, 30*time.Second, "kube-controller-manager to create the default ServiceAccount", func(ctx context.Context) (bool, error) {
		if err := c.exited(kcm); err != nil {
			return false, err
		}
		if err := c.exited(sched); err != nil {
			return false, err
		}
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// Kernel settings the kubelet insists on (it sets them unless
// protectKernelDefaults, which makes it check them instead). They are
// machine-wide, so each node's mount namespace shows the kubelet files
// holding the values it wants, and the machine's own stay as they are.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// setupNodeMountNS makes the node's mount namespace, kept by a bind of
// /proc/PID/ns/mnt onto a file: a private copy of the host's mounts in
// which /run and /var/log are the node's own tmpfs, /var/lib is the node's
// directory, and the kernel settings above read as the kubelet wants. Every
// mount the node's containerd and kubelet make (overlays, volumes, pod
// network namespaces) stays inside it and goes with it.
func (c *Cluster) setupNodeMountNS(ctx context.Context, n node) error {
	nsDir := filepath.Join(c.opts.WorkDir, "ns")
	if !isMountPoint(nsDir) {
		if err := os.MkdirAll(nsDir, 0o755); err != nil {
			return err
		}
		if err := c.state.addMount(nsDir); err != nil {
			return err
		}
		// A mount namespace file can only be bound on a private mount.
		if err := run(ctx, "mount", "--bind", nsDir, nsDir); err != nil {
			return err
		}
		if err := run(ctx, "mount", "--make-private", nsDir); err != nil {
			return err
		}
	}
	varLib := filepath.Join(n.Dir, "var-lib")
	sysctls := filepath.Join(n.Dir, "sysctl")
	for _, d := range []string{varLib, sysctls} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	script := []string{
		"set -e",
		"mount --make-rprivate /",
		"mount --bind " + varLib + " /var/lib",
		"mount -t tmpfs -o mode=755 tmpfs /run",
		"mount -t tmpfs -o mode=755 tmpfs /var/log",
	}
	for k, v := range kubeletSysctls {
		f := filepath.Join(sysctls, strings.ReplaceAll(k, "/", "_"))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o444); err != nil {
			return err
		}
		script = append(script, fmt.Sprintf("mount --bind -o ro %s /proc/sys/%s", f, k))
	}
	file := n.mountNSPath(c.opts.WorkDir)
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		return err
	}
	if err := c.state.addMount(file); err != nil {
		return err
	}
	return run(ctx, "unshare", "--mount="+file, "--propagation", "private", "sh", "-c", strings.Join(script, "\n"))
}

// inNode is the command prefix that runs a program in the node's network
// and mount namespaces.
func (c *Cluster) inNode(n node, args ...string) []string {
	return append([]string{"nsenter", "--mount=" + n.mountNSPath(c.opts.WorkDir), "--net=" + n.netnsPath(), "--"}, args...)
}

func (c *Cluster) containerdConfig(n node) string {
	return fmt.Sprintf(`version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  enable_selinux = false
  # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which
  # machines like this one (and rootless setups) withhold; the kubelet asks
  # -998 for every pod sandbox. Restricted, containerd gives its own (0).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  # Per registry host, how to reach it (ServeRegistry writes the cluster's
  # own); read at every pull.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, n.socket(), PauseImage, CNIBinDir, filepath.Join(n.Dir, "cni"), c.registryHostsDir())
}

func (c *Cluster) kubeletConfig(n node) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: true
cgroupDriver: cgroupfs
cgroupRoot: %q
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    # The API server's kubelet client certificate (logs, exec,
    # port-forward) comes from this CA.
    clientCAFile: %q
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
clusterDNS: [%s]
resolvConf: ""
registerNode: true
nodeLeaseDurationSeconds: 10
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, filepath.Join(c.state.CgroupBase, n.Name), n.socket(), n.IP, c.cp.ServingCAFile, ClusterDNSIP)
}

func (c *Cluster) kubeProxyConfig(n node, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
bindAddress: %s
clusterCIDR: %s
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  # nf_conntrack_max is machine-wide: leave it alone.
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, n.Name, n.IP, ClusterCIDR)
}

// startNodes starts each node's containerd, imports the images, then starts
// its kubelet and kube-proxy.
func (c *Cluster) startNodes(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := os.MkdirAll(filepath.Join(n.Dir, "cni"), 0o755); err != nil {
			return err
		}
		if err := c.setupNodeMountNS(ctx, n); err != nil {
			return fmt.Errorf("%s: mount namespace: %w", n.Name, err)
		}
		cfg := filepath.Join(n.Dir, "containerd.toml")
		if err := os.WriteFile(cfg, []byte(c.containerdConfig(n)), 0o644); err != nil {
			return err
		}
		ctrd, err := c.start(n.Name+"-containerd", c.inNode(n, "containerd", "--config", cfg)...)
		if err != nil {
			return err
		}
		if err := c.waitUntil(ctx, 30*time.Second, n.Name+"'s containerd", func(context.Context) (bool, error) {
			if err := c.exited(ctrd); err != nil {
				return false, err
			}
			conn, err := net.Dial("unix", n.socket())
			if err != nil {
				return false, nil
			}
			conn.Close()
			return true, nil
		}); err != nil {
			return err
		}
		images := c.opts.Images
		if c.opts.Install == nil {
			images = append(slices.Clone(images), c.opts.OutriggerImage)
		}
		for _, img := range images {
			start := time.Now()
			out, err := exec.CommandContext(ctx, "ctr", "--address", n.socket(), "-n", "k8s.io", "images", "import", "--no-unpack=false", img).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: importing %s: %w: %s", n.Name, img, err, out)
			}
			fmt.Fprintf(c.opts.Out, "    %s: imported %s (%s)\n", n.Name, filepath.Base(img), time.Since(start).Round(time.Millisecond))
		}
		kubeletKC := filepath.Join(n.Dir, "kubelet.kubeconfig")
		if err := c.userKubeconfig(kubeletKC, "system:node:"+n.Name, []string{"system:nodes", "system:masters"}, true); err != nil {
			return err
		}
		kcfg := filepath.Join(n.Dir, "kubelet.yaml")
		if err := os.WriteFile(kcfg, []byte(c.kubeletConfig(n)), 0o644); err != nil {
			return err
		}
		agents := []agent{{name: n.Name + "-kubelet", args: c.inNode(n, c.bin("kubelet"),
			"--config="+kcfg,
			"--kubeconfig="+kubeletKC,
			"--root-dir=/var/lib/kubelet",
			"--hostname-override="+n.Name,
			"--node-ip="+n.IP,
			"--cloud-provider=external",
			"--v=2",
		),
			// In a hybrid cluster, --provider-id: the machine's (a sim
			// instance's is known once the instance is created).
			providerID: c.opts.Hybrid,
		}}
		proxyKC := filepath.Join(n.Dir, "kube-proxy.kubeconfig")
		if err := c.userKubeconfig(proxyKC, "system:kube-proxy", []string{"system:masters"}, true); err != nil {
			return err
		}
		pcfg := filepath.Join(n.Dir, "kube-proxy.yaml")
		if err := os.WriteFile(pcfg, []byte(c.kubeProxyConfig(n, proxyKC)), 0o644); err != nil {
			return err
		}
		agents = append(agents, agent{name: n.Name + "-kube-proxy", args: c.inNode(n, c.bin("kube-proxy"), "--config="+pcfg, "--v=2")})
		c.mu.Lock()
		c.agents[n.Name] = agents
		c.mu.Unlock()
		if err := c.StartInstance(ctx, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// setupPodNetworks waits for each node's pod range (kube-controller-manager
// allocates it on registration), writes the node's CNI configuration from
// it, and routes every other node's range through that node: the job a
// network plugin or a cloud's routes do in a real cluster.
func (c *Cluster) setupPodNetworks(ctx context.Context) error {
	cidrs := map[string]string{}
	if err := c.waitUntil(ctx, 2*time.Minute, "every node to register and get a pod CIDR", func(ctx context.Context) (bool, error) {
		for _, n := range c.nodes {
			got, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil || got.Spec.PodCIDR == "" {
				return false, c.anyExited()
			}
			cidrs[n.Name] = got.Spec.PodCIDR
		}
		return true, nil
	}); err != nil {
		return err
	}
	for _, n := range c.nodes {
		conf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "outrigger-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "/var/lib/cni/networks",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, cidrs[n.Name])
		if err := os.WriteFile(filepath.Join(n.Dir, "cni", "10-outrigger-cluster.conflist"), []byte(conf), 0o644); err != nil {
			return err
		}
		for _, other := range c.nodes {
			if other.Name == n.Name {
				continue
			}
			if err := run(ctx, "ip", "-n", n.Name, "route", "replace", cidrs[other.Name], "via", other.IP); err != nil {
				return err
			}
		}
		if err := run(ctx, "ip", "-n", harnessNS, "route", "replace", cidrs[n.Name], "via", n.IP); err != nil {
			return err
		}
	}
	return nil
}

package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// CNIBinDir is where Debian's containernetworking-plugins puts the plugins.
const CNIBinDir = "/usr/lib/cni"

// requirement is one program the cluster runs, and the Debian package that
// ships it.
type requirement struct {
	path    string // absolute, or looked up in PATH
	pkg     string
	purpose string
}

var requirements = []requirement{
	{"containerd", "containerd", "each node's container runtime (one daemon per node, started by the harness)"},
	{"ctr", "containerd", "importing the images built from source into each node's containerd"},
	{"runc", "runc", "the OCI runtime containerd starts containers with"},
	{CNIBinDir + "/bridge", "containernetworking-plugins", "pod networking on each node (bridge + host-local IPAM)"},
	{CNIBinDir + "/host-local", "containernetworking-plugins", "pod address allocation from the node's 198.18 pod range"},
	{CNIBinDir + "/loopback", "containernetworking-plugins", "the pods' loopback interface"},
	{"iptables", "iptables", "kube-proxy (iptables mode) and the CNI portmap plugin, inside node namespaces"},
	{"conntrack", "conntrack", "kube-proxy clearing stale UDP flows"},
	{"ip", "iproute2", "network namespaces, the bridge and the veths"},
	{"nsenter", "util-linux", "starting each node's processes in its network namespace"},
}

func (r requirement) present() bool {
	if strings.HasPrefix(r.path, "/") {
		_, err := os.Stat(r.path)
		return err == nil
	}
	_, err := exec.LookPath(r.path)
	return err == nil
}

// MissingPackages returns the Debian packages whose programs are missing,
// each with why the cluster needs it.
func MissingPackages() map[string][]string {
	missing := map[string][]string{}
	for _, r := range requirements {
		if !r.present() {
			missing[r.pkg] = append(missing[r.pkg], fmt.Sprintf("%s: %s", r.path, r.purpose))
		}
	}
	return missing
}

// EnsurePackages installs the missing Debian packages with apt-get, saying
// which and why on out. The packages' own services are not used: the
// harness starts a containerd per node with its own configuration, and
// never reads /etc/containerd or /etc/cni/net.d.
func EnsurePackages(ctx context.Context, out io.Writer) error {
	missing := MissingPackages()
	if len(missing) == 0 {
		return nil
	}
	var pkgs []string
	for p := range missing {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	fmt.Fprintln(out, "Installing Debian packages the cluster needs:")
	for _, p := range pkgs {
		for _, why := range missing[p] {
			fmt.Fprintf(out, "  %s, for %s\n", p, why)
		}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("missing packages %s and no apt-get to install them: install them with your package manager", strings.Join(pkgs, " "))
	}
	run := func(args ...string) error {
		// Another installer (a second checkout's build, an operator) may
		// hold dpkg's lock for a while: wait for it rather than fail.
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=600"}, args...)...)
		cmd.Stdout, cmd.Stderr = out, out
		// No prompts; and no service started by a package's maintainer
		// scripts matters here, since the harness runs its own daemons.
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	if err := run("update", "-q"); err != nil {
		return err
	}
	if err := run(append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...)...); err != nil {
		return err
	}
	if still := MissingPackages(); len(still) > 0 {
		return fmt.Errorf("still missing after apt-get install: %v", still)
	}
	return nil
}

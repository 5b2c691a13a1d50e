// Package cluster runs a real Kubernetes cluster on this machine for
// Outrigger: etcd and kube-apiserver (internal/dev/apiserver), the upstream
// kube-controller-manager without its cloud controllers, kube-scheduler,
// and real nodes, each a containerd, a kubelet with --cloud-provider=external
// and a kube-proxy in a network namespace of its own, all joined by a bridge
// in a harness namespace. Outrigger, with its local provider, runs in the
// harness namespace and initializes the nodes.
//
// It only executes binaries (built from source by the controlplane module,
// and Debian's containerd, runc and CNI plugins): it never imports
// k8s.io/kubernetes. Every address is loopback or from 198.18.0.0/15, and
// nothing is configured on the machine's own interfaces: the API server
// stays on the host's loopback and reaches the namespaces through a
// forwarder that this process listens with inside the harness namespace.
//
// Everything it makes is recorded in a state file before it is made, so
// that Cleanup removes it after a normal stop, Ctrl-C, or a kill -9 of the
// harness (the next run cleans up first). docs/cluster.md has the layout.
package cluster

// Tenants: the tenant clusters of tenant mode, as the replica serving the
// console sees them.

package console

import (
	"cmp"
	"slices"
	"time"
)

// Tenant is one tenant cluster of tenant mode (docs/tenants.md): its
// Secret or file, the cluster it names, which replica holds its Lease and
// what this replica's run of it is doing.
type Tenant struct {
	Name string `json:"name"`
	// Source is its Secret or kubeconfig file.
	Source string `json:"source,omitempty"`
	// Cluster is the cluster's identity (kube-system UID) once read.
	Cluster string `json:"cluster,omitempty"`
	// Holder is the replica holding its Lease ("" for none); HeldHere
	// says it is the replica serving this console.
	Holder   string `json:"holder,omitempty"`
	HeldHere bool   `json:"heldHere"`
	// State is Serving, Waiting, Failing, Stopping (this replica's run),
	// Elsewhere (another replica holds it) or Unclaimed.
	State string `json:"state"`
	// Reason, Message and FailedAt are the last failure of this
	// replica's run while it waits to retry.
	Reason   string     `json:"reason,omitempty"`
	Message  string     `json:"message,omitempty"`
	FailedAt *time.Time `json:"failedAt,omitempty"`
}

// served says a replica runs the tenant's controllers: this one, or
// another whose Lease names the cluster it serves (it does only while its
// run serves).
func (t Tenant) served() bool {
	return t.State == "Serving" || (t.State == "Elsewhere" && t.Cluster != "")
}

// tenantView sorts the tenants by name and counts them: Ready are those
// some replica serves. Every tenant is sent: a process serves tens or
// hundreds, not the tens of thousands the node table is cut for.
func tenantView(in []Tenant) ([]Tenant, Count) {
	out := slices.Clone(in)
	if out == nil {
		out = []Tenant{}
	}
	slices.SortFunc(out, func(a, b Tenant) int { return cmp.Compare(a.Name, b.Name) })
	c := Count{Total: len(out), Matching: len(out)}
	for _, t := range out {
		if t.served() {
			c.Ready++
		}
	}
	return out, c
}

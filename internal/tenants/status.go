package tenants

import (
	"cmp"
	"slices"
	"time"
)

// The states of a tenant as one replica sees it (Status.State).
const (
	// StateServing: this replica runs the tenant's controllers.
	StateServing = "Serving"
	// StateWaiting: this replica holds the tenant's Lease and is
	// connecting to its API server, or has just been given it.
	StateWaiting = "Waiting"
	// StateFailing: this replica holds the tenant's Lease, and its last
	// run failed; it is retried with backoff (Reason, Message).
	StateFailing = "Failing"
	// StateStopping: this replica stops the tenant (removed, released,
	// restarted) and renews its Lease until it has.
	StateStopping = "Stopping"
	// StateElsewhere: another live replica holds the tenant's Lease.
	StateElsewhere = "Elsewhere"
	// StateUnclaimed: no live replica holds the tenant's Lease yet (new,
	// released, or its holder's Lease expired).
	StateUnclaimed = "Unclaimed"
)

// Status is one tenant as this replica sees it: from the tenants it read
// (Secrets and files), the tenant Leases as last read from the management
// cluster, and its own runs. What another replica's run of a tenant went
// through is in that replica's console and in the Events on the Secret.
type Status struct {
	// Name is the tenant's name; Source its Secret or file.
	Name   string
	Source string
	// Cluster is the identity (kube-system UID) of the cluster served,
	// from this replica's run or the Lease's annotation; "" until read.
	Cluster string
	// Holder is the replica holding the tenant's Lease ("" for none);
	// HeldHere says it is this replica.
	Holder   string
	HeldHere bool
	// State is one of the State constants.
	State string
	// Reason and Message are the last failure of this replica's run
	// (an Event reason, as ReasonUnreachable), FailedAt when; kept while
	// it waits to retry.
	Reason   string
	Message  string
	FailedAt time.Time
}

// runState is what status reads of one of this replica's runs.
type runState struct {
	cluster  string
	running  bool
	stopping bool
	failure  lastFailure
}

// lastFailure is a run's last failure, cleared when it serves again.
type lastFailure struct {
	reason, message string
	at              time.Time
}

// statuses is every tenant known, by name: those read and those with a
// Lease or a run here (a tenant whose Secret is gone still shows while it
// stops). It decides nothing and changes nothing.
func statuses(known []Tenant, claims map[string]Claim, runs map[string]runState, self string, now time.Time) []Status {
	byName := map[string]*Status{}
	get := func(name string) *Status {
		s := byName[name]
		if s == nil {
			s = &Status{Name: name}
			byName[name] = s
		}
		return s
	}
	for _, t := range known {
		get(t.Name).Source = t.Source()
	}
	for name, c := range claims {
		s := get(name)
		if c.live(now) {
			s.Holder, s.HeldHere = c.Holder, c.Holder == self
			s.Cluster = c.Cluster
		}
	}
	for name, r := range runs {
		s := get(name)
		s.Holder, s.HeldHere = self, true
		if r.cluster != "" {
			s.Cluster = r.cluster
		}
		switch {
		case r.stopping:
			s.State = StateStopping
		case r.running:
			s.State = StateServing
		case r.failure.reason != "":
			s.State = StateFailing
			s.Reason, s.Message, s.FailedAt = r.failure.reason, r.failure.message, r.failure.at
		default:
			s.State = StateWaiting
		}
	}
	out := make([]Status, 0, len(byName))
	for _, s := range byName {
		if s.State == "" {
			switch {
			case s.HeldHere:
				// Claimed this round, its run not started yet.
				s.State = StateWaiting
			case s.Holder != "":
				s.State = StateElsewhere
			default:
				s.State = StateUnclaimed
			}
		}
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Status is every tenant as this replica sees it now, by name (the
// console's Tenants view). The Leases are as read at the last round.
func (r *Reconciler) Status() []Status {
	r.mu.Lock()
	known, claims := r.known, r.claims
	runs := make(map[string]runState, len(r.runners)+len(r.stopping))
	for name, run := range r.runners {
		runs[name] = run.status()
	}
	for name, run := range r.stopping {
		s := run.status()
		s.stopping = true
		runs[name] = s
	}
	r.mu.Unlock()
	return statuses(known, claims, runs, r.opts.Identity, r.now())
}

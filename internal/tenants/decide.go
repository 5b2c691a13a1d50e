package tenants

import (
	"cmp"
	"hash/fnv"
	"slices"
	"time"
)

// Claim is one tenant Lease as decide sees it.
type Claim struct {
	// Holder is the replica holding it; "" when released.
	Holder string
	// Renewed is when its holder last renewed it, Duration how long after
	// that it stays the holder's.
	Renewed  time.Time
	Duration time.Duration
	// Cluster is the identity (kube-system UID) of the cluster its holder
	// serves under it, once the tenant's run has read it.
	Cluster string
}

// live reports whether the claim is still its holder's at now.
func (c Claim) live(now time.Time) bool {
	return c.Holder != "" && now.Before(c.Renewed.Add(c.Duration))
}

// World is what one replica knows when it decides: all of it read from the
// management cluster in one round, nothing from other replicas directly.
type World struct {
	// Self is this replica's identity.
	Self string
	Now  time.Time
	// Tenants are the tenants that exist (Secrets and files), by name.
	Tenants []string
	// Claims are the tenant Leases, by tenant name (also of tenants that
	// no longer exist).
	Claims map[string]Claim
	// Members are the replicas whose member Lease is live, Self included.
	Members []string
	// Slack is how many tenants above its share a replica keeps before it
	// releases some: 0 balances exactly, more moves fewer tenants when
	// replicas come and go.
	Slack int
}

// Decision is what this replica does this round. Every tenant name is in
// at most one list.
type Decision struct {
	// Share is the most tenants this replica claims: the tenants divided
	// by the live replicas, rounded up.
	Share int
	// Keep are the tenants this replica holds and goes on serving.
	Keep []string
	// Claim are tenants whose Lease is free (released, expired or never
	// made) that this replica takes, up to its share.
	Claim []string
	// Release are tenants this replica holds above its share plus slack:
	// it stops serving them and releases their Lease for another replica.
	Release []string
	// Forget are Leases of tenants that no longer exist, held by this
	// replica or by nobody live: their runs stop and the Leases go.
	Forget []string
	// Duplicates are tenants this replica holds whose cluster another
	// live tenant serves first (same kube-system UID; the tenant of the
	// lower name keeps it), by the tenant that keeps it: their runs stop
	// and they are kept (so no other replica tries them) until that ends.
	Duplicates map[string]string
}

// Decide computes this replica's round from w. It mutates nothing.
//
// Every replica runs it on what it read, so the rules only need each
// replica to be right about itself: claim only free Leases, never more than
// the share; release what is above share+slack, the tenants whose names
// rank last for this replica, so that two replicas do not both give up the
// same ones. The Lease's resourceVersion settles two replicas claiming one
// tenant in the same round.
func Decide(w World) Decision {
	d := Decision{}
	members := len(w.Members)
	if !slices.Contains(w.Members, w.Self) {
		members++ // this replica's own member Lease is not written yet
	}
	d.Share = (len(w.Tenants) + members - 1) / members
	exists := map[string]bool{}
	for _, t := range w.Tenants {
		exists[t] = true
	}

	var held, free []string
	for _, t := range w.Tenants {
		c, ok := w.Claims[t]
		switch {
		case ok && c.Holder == w.Self && c.live(w.Now):
			held = append(held, t)
		case !ok || !c.live(w.Now):
			free = append(free, t)
		}
	}
	for t, c := range w.Claims {
		if !exists[t] && (c.Holder == w.Self || !c.live(w.Now)) {
			d.Forget = append(d.Forget, t)
		}
	}
	slices.Sort(d.Forget)

	d.Duplicates = duplicates(w, held)
	// Ranked for this replica: the same order every round, a different
	// one on every replica, so that replicas claiming at once mostly
	// claim different tenants.
	rank := func(a, b string) int { return cmp.Compare(score(w.Self, a), score(w.Self, b)) }
	slices.SortFunc(held, rank)
	slices.SortFunc(free, rank)

	over := len(held) - (d.Share + w.Slack)
	if over <= 0 && len(free) == 0 && w.Slack == 0 && len(held)-leastLoaded(w) >= 2 {
		// Within the share, but a replica serves two fewer and nothing is
		// free for it: give it one, so that loads end within one of
		// each other (a ceiling alone allows 4, 4, 2 of ten).
		over = 1
	}
	if over > 0 {
		d.Release = slices.Clone(held[len(held)-over:])
		held = held[:len(held)-over]
		slices.Sort(d.Release)
	}
	d.Keep = held
	if room := d.Share - len(held); room > 0 {
		d.Claim = slices.Clone(free[:min(room, len(free))])
	}
	slices.Sort(d.Keep)
	slices.Sort(d.Claim)
	return d
}

// leastLoaded is the fewest live tenant Leases a live member holds.
func leastLoaded(w World) int {
	load := map[string]int{}
	for _, m := range w.Members {
		load[m] = 0
	}
	for _, c := range w.Claims {
		if _, member := load[c.Holder]; member && c.live(w.Now) {
			load[c.Holder]++
		}
	}
	least := -1
	for _, n := range load {
		if least < 0 || n < least {
			least = n
		}
	}
	return max(least, 0)
}

// duplicates finds, among the tenants this replica holds, those whose
// cluster a live tenant of a lower name also serves.
func duplicates(w World, held []string) map[string]string {
	first := map[string]string{}
	names := make([]string, 0, len(w.Claims))
	for t := range w.Claims {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		c := w.Claims[t]
		if c.Cluster == "" || !c.live(w.Now) {
			continue
		}
		if _, ok := first[c.Cluster]; !ok {
			first[c.Cluster] = t
		}
	}
	var out map[string]string
	for _, t := range held {
		c := w.Claims[t]
		if winner := first[c.Cluster]; c.Cluster != "" && winner != t {
			if out == nil {
				out = map[string]string{}
			}
			out[t] = winner
		}
	}
	return out
}

// score ranks tenant for replica (rendezvous hashing).
func score(replica, tenant string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(replica))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	return h.Sum64()
}

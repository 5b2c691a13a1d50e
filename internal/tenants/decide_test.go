package tenants

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// held is a claim of holder renewed ago before t0, for 15s.
func held(holder string, ago time.Duration) Claim {
	return Claim{Holder: holder, Renewed: t0.Add(-ago), Duration: 15 * time.Second}
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%02d", i)
	}
	return out
}

// TestDecide: a replica claims free and expired Leases up to its share,
// keeps what it holds within share+slack, releases the rest, leaves live
// Leases of others alone, and forgets the Leases of removed tenants.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    World
		// want are the lengths of Keep, Claim, Release, and the share.
		keep, claim, release, share int
		forget                      []string
		duplicates                  map[string]string
	}{{
		name:  "alone, no Leases yet: claims every tenant",
		w:     World{Self: "a", Tenants: names(5), Members: []string{"a"}},
		claim: 5, share: 5,
	}, {
		name:  "very first round, no member Lease read at all: counts itself alone",
		w:     World{Self: "a", Tenants: names(5)},
		claim: 5, share: 5,
	}, {
		name: "within the share but two above the least loaded, nothing free: releases one",
		w:    World{Self: "a", Tenants: names(10), Members: []string{"a", "b", "c"}, Claims: mix(claimsOf(names(10)[:4], "a", 0), claimsOf(names(10)[4:8], "b", 0), claimsOf(names(10)[8:], "c", 0))},
		keep: 3, release: 1, share: 4,
	}, {
		name:  "first round, own member Lease not yet read: counts itself",
		w:     World{Self: "b", Tenants: names(4), Members: []string{"a"}, Claims: claimsOf(names(4), "a", 0)},
		share: 2,
	}, {
		name: "a second replica joined: the first releases down to its share",
		w:    World{Self: "a", Tenants: names(4), Members: []string{"a", "b"}, Claims: claimsOf(names(4), "a", 0)},
		keep: 2, release: 2, share: 2,
	}, {
		name: "slack keeps one above the share",
		w:    World{Self: "a", Tenants: names(4), Members: []string{"a", "b"}, Claims: claimsOf(names(4), "a", 0), Slack: 1},
		keep: 3, release: 1, share: 2,
	}, {
		name:  "the new replica claims what was released, up to its share",
		w:     World{Self: "b", Tenants: names(4), Members: []string{"a", "b"}, Claims: mix(claimsOf(names(4)[:2], "a", 0), claimsOf(names(4)[2:], "", 0))},
		claim: 2, share: 2,
	}, {
		name: "a dead replica's Leases expire and are claimed",
		w:    World{Self: "a", Tenants: names(4), Members: []string{"a"}, Claims: mix(claimsOf(names(4)[:2], "a", 0), claimsOf(names(4)[2:], "b", 20*time.Second))},
		keep: 2, claim: 2, share: 4,
	}, {
		name:  "live Leases of another replica are left alone even below the share",
		w:     World{Self: "a", Tenants: names(4), Members: []string{"a"}, Claims: claimsOf(names(4), "b", 5*time.Second)},
		share: 4,
	}, {
		name: "three replicas, seven tenants: a share of three",
		w:    World{Self: "c", Tenants: names(7), Members: []string{"a", "b", "c"}, Claims: mix(claimsOf(names(7)[:3], "a", 0), claimsOf(names(7)[3:5], "b", 0))},
		// two free for c; its share is 3
		claim: 2, share: 3,
	}, {
		name: "a removed tenant's Lease: forgotten when held by this replica or expired, not when another holds it live",
		w:    World{Self: "a", Tenants: names(1), Members: []string{"a", "b"}, Claims: map[string]Claim{"t00": held("a", 0), "gone-a": held("a", 0), "gone-x": held("b", 30*time.Second), "gone-b": held("b", 0)}},
		keep: 1, share: 1,
		forget: []string{"gone-a", "gone-x"},
	}, {
		name: "two tenants naming one cluster: the higher name is the duplicate",
		w: World{Self: "a", Tenants: names(3), Members: []string{"a"}, Claims: map[string]Claim{
			"t00": withCluster(held("b", 0), "uid-1"), "t01": withCluster(held("a", 0), "uid-1"), "t02": withCluster(held("a", 0), "uid-2")}},
		keep: 2, share: 3, duplicates: map[string]string{"t01": "t00"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.w.Now = t0
			d := Decide(tc.w)
			if len(d.Keep) != tc.keep || len(d.Claim) != tc.claim || len(d.Release) != tc.release || d.Share != tc.share {
				t.Errorf("keep %v, claim %v, release %v, share %d; want %d, %d, %d, share %d", d.Keep, d.Claim, d.Release, d.Share, tc.keep, tc.claim, tc.release, tc.share)
			}
			if !slices.Equal(d.Forget, tc.forget) {
				t.Errorf("forget %v, want %v", d.Forget, tc.forget)
			}
			if !maps.Equal(d.Duplicates, tc.duplicates) {
				t.Errorf("duplicates %v, want %v", d.Duplicates, tc.duplicates)
			}
			seen := map[string]bool{}
			for _, n := range slices.Concat(d.Keep, d.Claim, d.Release, d.Forget) {
				if seen[n] {
					t.Errorf("%s in two lists", n)
				}
				seen[n] = true
			}
			if len(d.Keep)+len(d.Claim) > d.Share+tc.w.Slack {
				t.Errorf("serves %d, above share %d + slack %d", len(d.Keep)+len(d.Claim), d.Share, tc.w.Slack)
			}
		})
	}
}

// TestDecideConverges runs rounds of replicas deciding in turn on a shared
// Lease table: every tenant ends up served exactly once, within one of the
// even share, also after a replica joins and after one dies.
func TestDecideConverges(t *testing.T) {
	tenants := names(10)
	claims := map[string]Claim{}
	now := t0
	rounds := func(members []string) {
		for range 6 {
			for _, self := range members {
				d := Decide(World{Self: self, Now: now, Tenants: tenants, Claims: claims, Members: members})
				for _, n := range d.Release {
					claims[n] = Claim{}
				}
				for _, n := range slices.Concat(d.Keep, d.Claim) {
					claims[n] = Claim{Holder: self, Renewed: now, Duration: 15 * time.Second}
				}
			}
			now = now.Add(2 * time.Second)
		}
	}
	check := func(members []string) {
		t.Helper()
		load := map[string]int{}
		for _, n := range tenants {
			c := claims[n]
			if !c.live(now) || !slices.Contains(members, c.Holder) {
				t.Fatalf("%s not served by a live replica: %+v", n, c)
			}
			load[c.Holder]++
		}
		share := (len(tenants) + len(members) - 1) / len(members)
		for _, m := range members {
			if load[m] > share || load[m] < share-1 {
				t.Errorf("replica %s serves %d, want %d or %d (loads %v)", m, load[m], share-1, share, load)
			}
		}
	}
	rounds([]string{"a"})
	check([]string{"a"})
	rounds([]string{"a", "b", "c"})
	check([]string{"a", "b", "c"})
	// b dies: its Leases age out while a and c go on.
	for range 10 {
		rounds([]string{"a", "c"})
	}
	check([]string{"a", "c"})
}

func claimsOf(tenants []string, holder string, ago time.Duration) map[string]Claim {
	out := map[string]Claim{}
	for _, n := range tenants {
		if holder == "" {
			out[n] = Claim{}
			continue
		}
		out[n] = held(holder, ago)
	}
	return out
}

func mix(ms ...map[string]Claim) map[string]Claim {
	out := map[string]Claim{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

func withCluster(c Claim, cluster string) Claim { c.Cluster = cluster; return c }

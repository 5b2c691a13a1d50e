package manager_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// oneWriterAtATime checks the cloud's call log of a hand-over from replica
// old to replica next, told to happen at stopAt: the standby made no call
// before it, both wrote (or the hand-over was not mid-work), and no call of
// one replica overlaps in time a call of the other on the same object.
func oneWriterAtATime(log []simcloud.LoggedCall, old, next string, stopAt time.Time) (summary string, problems []string) {
	var oldWrites, nextWrites int
	byObject := map[string][]simcloud.LoggedCall{}
	for _, c := range log {
		if c.Caller != old && c.Caller != next {
			problems = append(problems, fmt.Sprintf("a call from %q, neither replica", c.Caller))
			continue
		}
		if c.Caller == next && c.Start.Before(stopAt) {
			problems = append(problems, fmt.Sprintf("the standby called the cloud before the hand-over: %s %s at %s", c.Op, c.Object, c.Start))
		}
		if !c.Mutating {
			continue
		}
		if c.Caller == old {
			oldWrites++
		} else {
			nextWrites++
		}
		byObject[c.Object] = append(byObject[c.Object], c)
	}
	if oldWrites == 0 || nextWrites == 0 {
		problems = append(problems, fmt.Sprintf("mutating calls: %d from the old leader, %d from the new: not a hand-over mid-work", oldWrites, nextWrites))
	}
	shared := 0
	for object, calls := range byObject {
		sort.Slice(calls, func(i, j int) bool { return calls[i].Start.Before(calls[j].Start) })
		callers := map[string]bool{}
		for i, a := range calls {
			callers[a.Caller] = true
			for _, b := range calls[i+1:] {
				if a.Caller != b.Caller && b.Start.Before(a.End) {
					problems = append(problems, fmt.Sprintf("two replicas changed %s at once: %s by %s [%s, %s] and %s by %s [%s, %s]", object,
						a.Op, a.Caller, a.Start.Format(time.StampMicro), a.End.Format(time.StampMicro),
						b.Op, b.Caller, b.Start.Format(time.StampMicro), b.End.Format(time.StampMicro)))
				}
			}
		}
		if len(callers) == 2 {
			shared++
		}
	}
	return fmt.Sprintf("%d mutating calls from the old leader, %d from the new, %d objects written by both", oldWrites, nextWrites, shared), problems
}

// The hand-over test's call-log check must be able to fail.
func TestOneWriterAtATime(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	write := func(caller, object string, from, to int) simcloud.LoggedCall {
		return simcloud.LoggedCall{Op: "PutLoadBalancer", Mutating: true, Object: object, Caller: caller, Start: at(from), End: at(to)}
	}
	stop := at(100)
	for _, tc := range []struct {
		name string
		log  []simcloud.LoggedCall
		want string // a problem reported, "" for none
	}{
		{name: "one after the other", log: []simcloud.LoggedCall{write("a", "lb/x", 0, 90), write("b", "lb/x", 150, 160)}},
		{name: "overlapping on one object", log: []simcloud.LoggedCall{write("a", "lb/x", 90, 200), write("b", "lb/x", 150, 160)}, want: "two replicas changed lb/x at once"},
		{name: "overlapping on different objects", log: []simcloud.LoggedCall{write("a", "lb/x", 90, 200), write("b", "lb/y", 150, 160)}},
		{name: "standby before the hand-over", log: []simcloud.LoggedCall{write("a", "lb/x", 0, 10), write("b", "lb/y", 50, 60)}, want: "standby called the cloud"},
		{name: "no hand-over mid-work", log: []simcloud.LoggedCall{write("a", "lb/x", 0, 10)}, want: "not a hand-over mid-work"},
		{name: "a third caller", log: []simcloud.LoggedCall{write("a", "lb/x", 0, 10), write("b", "lb/x", 150, 160), write("c", "lb/z", 0, 1)}, want: "neither replica"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, problems := oneWriterAtATime(tc.log, "a", "b", stop)
			got := strings.Join(problems, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
}

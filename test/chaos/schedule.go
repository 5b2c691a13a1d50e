// Package chaos is a bounded, seeded, repeatable chaos run of Outrigger on
// the dev control plane (a real etcd and kube-apiserver) and the sim cloud:
// a workload of node joins and removals and LoadBalancer Service churn runs
// while faults are injected (Outrigger replicas and the API server
// SIGKILLed and restarted, etcd paused, the cloud erroring, throttling,
// hanging, out of quota, losing instances), and invariants are checked
// throughout and once everything has settled. The schedule of both is a
// function of the seed alone: the same seed gives the same schedule.
package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"time"
)

// Workload kinds.
const (
	NodeJoin       = "node-join"
	NodeRemove     = "node-remove"
	ServiceCreate  = "service-create"
	ServicePorts   = "service-ports"
	ServiceETP     = "service-etp"
	ServiceAnnot   = "service-annotate"
	ServiceType    = "service-type-class"
	ServiceDelete  = "service-delete"
	workloadPeriod = 1200 * time.Millisecond // mean gap between workload steps
)

// Fault kinds.
const (
	KillOutrigger  = "outrigger-sigkill"
	KillAPIServer  = "apiserver-sigkill"
	PauseEtcd      = "etcd-pause"
	CloudErrors    = "cloud-errors"
	Cloud429       = "cloud-429-storm"
	CloudHang      = "cloud-30s-hang"
	CloudQuota     = "cloud-quota-exhausted"
	InstanceDelete = "instance-deleted"
)

// FaultKinds are every fault the harness injects.
var FaultKinds = []string{KillOutrigger, KillAPIServer, PauseEtcd, CloudErrors, Cloud429, CloudHang, CloudQuota, InstanceDelete}

// Fault kinds of the optional settings (Config.Shared, Hang,
// LostResponses), each added to every round when its setting is on.
const (
	// KillSharedCCM SIGKILLs a replica of the second CCM (Config.Shared).
	KillSharedCCM = "shared-ccm-sigkill"
	// ObjectHang: the cloud never answers calls on the load balancers of
	// some Services while the others' are answered (Config.Hang).
	ObjectHang = "cloud-object-hang"
	// LostResponses: a share of the replicas' writes to the API server
	// commit, and their answer is lost (Config.LostResponses).
	LostResponses = "api-lost-responses"
	// PluginRestart: every plugin of Outrigger's replicas is SIGKILLed
	// while a cloud call is in flight, and started again after the hold
	// (Config.Plugin).
	PluginRestart = "plugin-restart-mid-call"
	// KillSecondCluster SIGKILLs a replica of the second cluster's
	// Outrigger (Config.SecondCluster).
	KillSecondCluster = "second-cluster-sigkill"
)

// weighted is a workload kind and its share of the steps.
type weighted struct {
	kind   string
	weight int
}

// workloadWeights make Service churn the bulk of the workload.
var workloadWeights = []weighted{
	{NodeJoin, 10}, {NodeRemove, 8}, {ServiceCreate, 20}, {ServicePorts, 12},
	{ServiceETP, 8}, {ServiceAnnot, 8}, {ServiceType, 6}, {ServiceDelete, 12},
}

// Step is one scheduled action.
type Step struct {
	// At is the offset from the start of the run.
	At   time.Duration `json:"at"`
	Kind string        `json:"kind"`
	// Pick chooses the target (a node, a Service, a replica) among the
	// candidates at the time, modulo their number, and the variant (ports,
	// policy, class).
	Pick uint32 `json:"pick"`
	// Hold is how long a fault lasts before it is lifted.
	Hold time.Duration `json:"hold,omitempty"`
}

// Schedule is a run's workload and faults.
type Schedule struct {
	Workload []Step `json:"workload"`
	// Faults run one at a time, each lifted before the next.
	Faults []Step `json:"faults"`
	// Second is the second cluster's workload (Config.SecondCluster),
	// empty otherwise: omitted, so that it leaves other schedules' digests
	// as they were.
	Second []Step `json:"second,omitempty"`
}

// holds bound each fault's duration; a 30 s hang is the cloud's answer
// time, its window is how long new calls keep being held.
var holds = map[string][2]time.Duration{
	KillOutrigger:     {0, 5 * time.Second}, // down before the restart
	KillAPIServer:     {time.Second, 6 * time.Second},
	PauseEtcd:         {time.Second, 6 * time.Second},
	CloudErrors:       {3 * time.Second, 10 * time.Second},
	Cloud429:          {3 * time.Second, 10 * time.Second},
	CloudHang:         {2 * time.Second, 5 * time.Second},
	CloudQuota:        {3 * time.Second, 10 * time.Second},
	InstanceDelete:    {0, 0},
	KillSharedCCM:     {0, 5 * time.Second},
	KillSecondCluster: {0, 5 * time.Second},
	// Long enough for Services created during it to be measured.
	ObjectHang:    {20 * time.Second, 30 * time.Second},
	LostResponses: {5 * time.Second, 15 * time.Second},
	PluginRestart: {time.Second, 8 * time.Second}, // down before the restart
}

// secondWeights are the second cluster's workload (Config.SecondCluster):
// nodes and class-less LoadBalancer Services come and go, at half the
// first cluster's pace.
var secondWeights = []weighted{
	{NodeJoin, 10}, {NodeRemove, 8}, {ServiceCreate, 20}, {ServicePorts, 8}, {ServiceDelete, 12},
}

// NewSchedule derives a run of length d from seed alone. Faults come in
// rounds that each hold every kind once, in a seeded order, so even a short
// run injects every kind; the last one is lifted before d. The rounds hold
// the kinds of FaultKinds and extra (fault kinds of the optional
// settings): without extra kinds, the schedule is that of FaultKinds
// alone. With KillSecondCluster among them, Second is the second cluster's
// workload, drawn from a generator of its own so that the first cluster's
// workload stays as it was.
func NewSchedule(seed uint64, d time.Duration, extra ...string) Schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var s Schedule
	s.Workload = workload(rng, d, workloadWeights, 2*workloadPeriod)
	if slices.Contains(extra, KillSecondCluster) {
		s.Second = workload(rand.New(rand.NewPCG(seed^0x5ec0d, seed^0x6a09e667f3bcc909)), d, secondWeights, 4*workloadPeriod)
	}
	at := 5 * time.Second
	for done := false; !done; {
		round := append(append([]string(nil), FaultKinds...), extra...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, kind := range round {
			h := holds[kind]
			hold := h[0]
			if h[1] > h[0] {
				hold += time.Duration(rng.Int64N(int64(h[1] - h[0]))).Truncate(100 * time.Millisecond)
			}
			// A gap lets the system make some progress between faults.
			gap := 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))).Truncate(100*time.Millisecond)
			if at+hold >= d {
				done = true
				break
			}
			s.Faults = append(s.Faults, Step{At: at, Kind: kind, Pick: rng.Uint32(), Hold: hold})
			at += hold + gap
		}
	}
	return s
}

// workload draws steps of the weighted kinds, at most maxGap apart, until d.
func workload(rng *rand.Rand, d time.Duration, weights []weighted, maxGap time.Duration) []Step {
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	var out []Step
	for at := time.Duration(0); ; {
		at += time.Duration(rng.Int64N(int64(maxGap)))
		if at >= d {
			return out
		}
		n := rng.IntN(total)
		kind := ""
		for _, w := range weights {
			if n < w.weight {
				kind = w.kind
				break
			}
			n -= w.weight
		}
		out = append(out, Step{At: at, Kind: kind, Pick: rng.Uint32()})
	}
}

// Digest identifies a schedule: equal digests, equal schedules.
func (s Schedule) Digest() string {
	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

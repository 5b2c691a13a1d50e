package manager

import (
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"

	// The gates the upstream CCM's --feature-gates lists: k8s.io/apiserver's
	// and the controller manager's (CloudControllerManagerWebhook,
	// ControllerManagerReleaseLeaderElectionLockOnExit, ...).
	_ "k8s.io/apiserver/pkg/features"
	_ "k8s.io/controller-manager/pkg/features/register"
)

// featureGate is the process's --feature-gates, the same gates as the
// upstream cloud-controller-manager's so a manifest's --feature-gates carries
// over. docs/flags.md says which change what Outrigger does.
var featureGate featuregate.MutableVersionedFeatureGate = utilfeature.DefaultMutableFeatureGate

// Outrigger's own gates.
const (
	// BatchInstanceLookups lets Outrigger ask a provider that implements
	// provider.BatchInstances about many nodes in one call. Off, every
	// provider is asked node by node, as upstream does.
	BatchInstanceLookups featuregate.Feature = "BatchInstanceLookups"
)

func init() {
	runtime.Must(logsapi.AddFeatureGates(featureGate))
	runtime.Must(featureGate.AddVersioned(map[featuregate.Feature]featuregate.VersionedSpecs{
		BatchInstanceLookups: {{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta}},
	}))
}

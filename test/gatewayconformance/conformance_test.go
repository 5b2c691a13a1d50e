package gatewayconformance

import (
	"encoding/binary"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1alpha3"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	conformanceconfig "sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/outrigger-ccm/outrigger/cluster"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/version"
)

// Environment of the run (cmd/gateway-conformance sets it):
//   - GATEWAY_CONFORMANCE_KUBECONFIG: the cluster's kubeconfig; unset, the
//     test is skipped (it needs the real cluster).
//   - GATEWAY_CONFORMANCE_REPORT: where the suite writes its report.
//   - GATEWAY_CONFORMANCE_CLASS: the GatewayClass (default outrigger-local).
//   - GATEWAY_CONFORMANCE_RUN_TEST: one test's short name, to run only it.
//   - GATEWAY_CONFORMANCE_SKIP: short names to skip, comma separated.
//   - GATEWAY_CONFORMANCE_CHANNEL: the CRDs' channel; "experimental" adds
//     the retry features to those of a single test's run.

// Profiles are the conformance profiles Outrigger claims.
var Profiles = []suite.ConformanceProfileName{
	suite.GatewayHTTPConformanceProfileName,
	suite.GatewayGRPCConformanceProfileName,
	suite.GatewayTCPConformanceProfileName,
	suite.GatewayUDPConformanceProfileName,
	suite.GatewayTLSConformanceProfileName,
}

func TestGatewayConformance(t *testing.T) {
	kubeconfig := os.Getenv("GATEWAY_CONFORMANCE_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("GATEWAY_CONFORMANCE_KUBECONFIG is unset: run `make gateway-conformance` (root), which starts the real cluster")
	}
	log.SetLogger(zap.New(zap.WriteTo(os.Stdout), zap.UseDevMode(true)))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, install := range []func(*runtime.Scheme) error{v1alpha3.Install, v1alpha2.Install, gwv1.Install, apiextensionsv1.AddToScheme} {
		if err := install(c.Scheme()); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	class := os.Getenv("GATEWAY_CONFORMANCE_CLASS")
	if class == "" {
		class = "outrigger-local"
	}
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     class,
			CleanupBaseResources: true,
			CleanupTestResources: true,
			TimeoutConfig:        conformanceconfig.DefaultTimeoutConfig(),
			ConformanceProfiles:  Profiles,
			ReportOutputPath:     os.Getenv("GATEWAY_CONFORMANCE_REPORT"),
			RunTest:              os.Getenv("GATEWAY_CONFORMANCE_RUN_TEST"),
			Implementation: confv1.Implementation{
				Organization: "outrigger-ccm",
				Project:      "outrigger",
				URL:          "https://github.com/outrigger-ccm/outrigger",
				Version:      "v" + version.Version,
				Contact:      []string{"https://github.com/outrigger-ccm/outrigger/issues"},
			},
			Mode: "default",
		},
		Client:     c,
		Clientset:  cs,
		RestConfig: cfg,
		ManifestFS: []fs.FS{&conformance.Manifests},
	}
	// GatewayStaticAddresses asks for an address the provider can give
	// and one it cannot: the local provider gives its pool's addresses
	// (the last is never handed out before the others), and none outside
	// the pool.
	pool := netip.MustParsePrefix(cluster.VIPPool)
	usable, unusable := lastAddress(pool), lastAddress(pool).Next().Next()
	opts.UsableNetworkAddresses = []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType), Value: usable.String()}}
	opts.UnusableNetworkAddresses = []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType), Value: unusable.String()}}
	// The features tested are those the GatewayClass states in its
	// status; the suite reads them there unless one test is picked.
	if opts.RunTest != "" {
		// The runner deploys Outrigger in gateway namespace mode, whose
		// classes state GatewayInfrastructure besides SupportedFeatures.
		opts.SupportedFeatures = append(slices.Clip(gateway.SupportedFeatures), features.SupportGatewayInfrastructure)
		if os.Getenv("GATEWAY_CONFORMANCE_CHANNEL") == "experimental" {
			opts.SupportedFeatures = append(slices.Clip(opts.SupportedFeatures), gateway.RetryFeatures...)
		}
	}
	if skip := os.Getenv("GATEWAY_CONFORMANCE_SKIP"); skip != "" {
		opts.SkipTests = strings.Split(skip, ",")
	}
	conformance.RunConformanceWithOptions(t, opts)
}

// lastAddress is the pool's last address but its broadcast one.
func lastAddress(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	broadcast := binary.BigEndian.Uint32(a[:]) | (1<<(32-p.Bits()) - 1)
	binary.BigEndian.PutUint32(a[:], broadcast-1)
	return netip.AddrFrom4(a)
}

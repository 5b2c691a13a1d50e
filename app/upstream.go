package app

import (
	"context"
	"errors"
	"time"

	cloudprovider "k8s.io/cloud-provider"
	upstream "k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/controller-manager/pkg/clientbuilder"
)

// The rest of upstream's API, each identifier with upstream's type, so that
// a provider's main or controller package naming it compiles unchanged.
// Webhook types are upstream's own: a handler a provider builds with them
// answers admission reviews as upstream's does.
type (
	WebhookConfig  = upstream.WebhookConfig
	WebhookHandler = upstream.WebhookHandler
)

// ControllerStartJitter is upstream's jitter factor of controller starts.
// Outrigger starts controllers together once the cache has synced, so it
// is only for a main that uses it itself.
const ControllerStartJitter = upstream.ControllerStartJitter

// WebhooksDisabledByDefault is upstream's set itself: NewWebhookHandlers
// leaves out what a provider inserts here unless --webhooks names it.
var WebhooksDisabledByDefault = upstream.WebhooksDisabledByDefault

// StartCloudNodeControllerWrapper, StartCloudNodeLifecycleControllerWrapper,
// StartServiceControllerWrapper and StartRouteControllerWrapper stand for
// upstream's four controllers: a ControllerInitFuncConstructor carrying one
// runs Outrigger's controller of that name inside its manager (with its
// call layer, ownership and leader election), not the InitFunc, which
// only says so if something calls it.
func StartCloudNodeControllerWrapper(ControllerInitContext, *cloudcontrollerconfig.CompletedConfig, cloudprovider.Interface) InitFunc {
	return runsInManager
}

func StartCloudNodeLifecycleControllerWrapper(ControllerInitContext, *cloudcontrollerconfig.CompletedConfig, cloudprovider.Interface) InitFunc {
	return runsInManager
}

func StartServiceControllerWrapper(ControllerInitContext, *cloudcontrollerconfig.CompletedConfig, cloudprovider.Interface) InitFunc {
	return runsInManager
}

func StartRouteControllerWrapper(ControllerInitContext, *cloudcontrollerconfig.CompletedConfig, cloudprovider.Interface) InitFunc {
	return runsInManager
}

func runsInManager(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
	return nil, false, errors.New("this controller runs inside Outrigger's manager, not through an InitFunc")
}

// ConstructControllerInitializers builds every constructor's InitFunc with
// the initialized config and cloud, as upstream's does.
func ConstructControllerInitializers(controllerInitFuncConstructors map[string]ControllerInitFuncConstructor, completedConfig *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) map[string]InitFunc {
	out := make(map[string]InitFunc, len(controllerInitFuncConstructors))
	for name, c := range controllerInitFuncConstructors {
		out[name] = c.Constructor(c.InitContext, completedConfig, cloud)
	}
	return out
}

// CreateControllerContext is upstream's: the controller context a main
// starting controllers itself hands them, with informers of its own.
// Under NewCloudControllerManagerCommand, provider controllers get one
// whose typed informers are Outrigger's shared cache instead.
func CreateControllerContext(s *cloudcontrollerconfig.CompletedConfig, clientBuilder clientbuilder.ControllerClientBuilder, stop <-chan struct{}) (genericcontrollermanager.ControllerContext, error) {
	return upstream.CreateControllerContext(s, clientBuilder, stop)
}

// ResyncPeriod is a random period between --min-resync-period and twice
// it, drawn at each call, as upstream's.
func ResyncPeriod(c *cloudcontrollerconfig.CompletedConfig) func() time.Duration {
	return upstream.ResyncPeriod(c)
}

// NewWebhookHandlers are the handlers of the enabled webhooks (by
// --webhooks and WebhooksDisabledByDefault), as upstream's.
func NewWebhookHandlers(webhookConfigs map[string]WebhookConfig, completedConfig *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) map[string]WebhookHandler {
	return upstream.NewWebhookHandlers(webhookConfigs, completedConfig, cloud)
}

// WebhookNames are the webhooks' names, sorted.
func WebhookNames(webhooks map[string]WebhookConfig) []string {
	return upstream.WebhookNames(webhooks)
}

// RegisterMetrics registers the webhook handlers' request metrics, which
// WebhookHandler records, in component-base's registry (served on
// /metrics).
func RegisterMetrics() { upstream.RegisterMetrics() }

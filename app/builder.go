package app

import (
	"fmt"
	"maps"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
)

// CommandBuilder builds a provider's command step by step, as upstream's
// does, and its command is NewCloudControllerManagerCommand's, on
// Outrigger, plus the webhooks registered, served on the webhook port.
type CommandBuilder struct {
	webhooks     map[string]WebhookConfig
	constructors map[string]ControllerInitFuncConstructor
	aliases      map[string]string
	flags        cliflag.NamedFlagSets
	options      *options.CloudControllerManagerOptions
	cloudInit    InitCloudFunc
	stop         <-chan struct{}
	name, long   string
	defaults     *options.ProviderDefaults
}

// NewBuilder returns an empty builder: no controllers until
// RegisterDefaultControllers or RegisterController.
func NewBuilder() *CommandBuilder {
	return &CommandBuilder{
		webhooks:     map[string]WebhookConfig{},
		constructors: map[string]ControllerInitFuncConstructor{},
		aliases:      map[string]string{},
	}
}

// SetOptions sets the options the flags are bound to; unset, they are
// upstream's with the provider defaults.
func (cb *CommandBuilder) SetOptions(options *options.CloudControllerManagerOptions) {
	cb.options = options
}

// AddFlags sets the provider's additional flags.
func (cb *CommandBuilder) AddFlags(additionalFlags cliflag.NamedFlagSets) {
	cb.flags = additionalFlags
}

// RegisterController adds a controller; of aliases, those naming it are
// accepted by --controllers.
func (cb *CommandBuilder) RegisterController(name string, constructor ControllerInitFuncConstructor, aliases map[string]string) {
	cb.constructors[name] = constructor
	for alias, target := range aliases {
		if target == name {
			cb.aliases[alias] = target
		}
	}
}

// RegisterDefaultControllers adds DefaultInitFuncConstructors and
// upstream's aliases of them.
func (cb *CommandBuilder) RegisterDefaultControllers() {
	maps.Copy(cb.constructors, DefaultInitFuncConstructors)
	maps.Copy(cb.aliases, names.CCMControllerAliases())
}

// RegisterWebhook adds a webhook, served at config.Path on the webhook
// port once --webhooks enables it and the CloudControllerManagerWebhook
// feature gate is on.
func (cb *CommandBuilder) RegisterWebhook(name string, config WebhookConfig) {
	cb.webhooks[name] = config
}

// SetCloudInitializer sets the function that builds the cloud.
func (cb *CommandBuilder) SetCloudInitializer(cloudInitializer InitCloudFunc) {
	cb.cloudInit = cloudInitializer
}

// SetStopChannel sets the channel that stops the command; unset, only a
// signal does.
func (cb *CommandBuilder) SetStopChannel(stopCh <-chan struct{}) {
	cb.stop = stopCh
}

// SetCmdName sets the command's name (its Use).
func (cb *CommandBuilder) SetCmdName(name string) {
	cb.name = name
}

// SetLongDesc sets the command's long description.
func (cb *CommandBuilder) SetLongDesc(long string) {
	cb.long = long
}

// SetProviderDefaults sets defaults of the options built when SetOptions
// was not called (the webhook port's address and port).
func (cb *CommandBuilder) SetProviderDefaults(defaults options.ProviderDefaults) {
	cb.defaults = &defaults
}

// BuildCommand returns the command. Options that cannot be built are a
// command that fails with that error, printed once when it runs.
func (cb *CommandBuilder) BuildCommand() *cobra.Command {
	name, long, stop := cb.name, cb.long, cb.stop
	if name == "" {
		name = "cloud-controller-manager"
	}
	if long == "" {
		long = "The cloud controller manager runs the cloud specific control loops, on Outrigger."
	}
	if stop == nil {
		stop = wait.NeverStop
	}
	s := cb.options
	if s == nil {
		defaults := options.ProviderDefaults{}
		if cb.defaults != nil {
			defaults = *cb.defaults
		}
		var err error
		if s, err = options.NewCloudControllerManagerOptionsWithProviderDefaults(defaults); err != nil {
			cmd := &cobra.Command{Use: name, Long: long, SilenceUsage: true, RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("the command's options: %w", err)
			}}
			printOnce(cmd)
			return cmd
		}
	}
	return newCommand(&binary{
		s: s, cloudInitializer: cb.cloudInit, constructors: cb.constructors, aliases: cb.aliases, stop: stop,
		webhooks: cb.webhooks,
	}, name, long, cb.flags)
}

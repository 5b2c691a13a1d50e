package cloud

// ProviderName is the name of the provider behind the layer's
// LoadBalancer, for Events about its answers (Options.Name).
func (b loadBalancer) ProviderName() string { return b.layer.opts.Name }

// ProviderName is the name of the provider behind the layer's Instances,
// for Events about its answers (Options.Name).
func (i *Instances) ProviderName() string { return i.layer.opts.Name }

// ProviderNameOf returns the name of the provider behind v, one of the
// layer's interfaces, or fallback when v does not say (a test's double).
func ProviderNameOf(v any, fallback string) string {
	if n, ok := v.(interface{ ProviderName() string }); ok && n.ProviderName() != "" {
		return n.ProviderName()
	}
	return fallback
}

package manager

import (
	"encoding/json"
	"net/http"
)

// configzHandler serves the effective configuration under upstream's key,
// with upstream's section names where upstream has the setting.
func (o *Options) configzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		enabled, _ := o.EnabledControllers()
		cfg := map[string]any{"cloudcontrollermanager": map[string]any{
			"kind":       "CloudControllerManagerConfiguration",
			"apiVersion": "cloudcontrollermanager.config.k8s.io/v1alpha1",
			"Generic": map[string]any{
				"Port": o.Serving.BindPort, "Address": o.Serving.BindAddress.String(),
				"MinResyncPeriod":         o.MinResyncPeriod.String(),
				"ClientConnection":        map[string]any{"ContentType": o.KubeAPIContentType, "QPS": o.APIQPS(), "Burst": o.APIBurst()},
				"ControllerStartInterval": o.ControllerStartInterval.String(),
				"LeaderElection": map[string]any{
					"LeaderElect": o.LeaderElect, "LeaseDuration": o.LeaderElectLeaseDuration.String(),
					"RenewDeadline": o.LeaderElectRenewDeadline.String(), "RetryPeriod": o.LeaderElectRetryPeriod.String(),
					"ResourceLock": o.LeaderElectResourceLock, "ResourceName": o.LeaderElectResourceName,
					"ResourceNamespace": o.LeaderElectResourceNamespace,
				},
				"Controllers": o.Controllers, "EnabledControllers": enabled,
				"Debugging":              map[string]any{"EnableProfiling": o.Profiling, "EnableContentionProfiling": o.ContentionProfiling},
				"LeaderMigrationEnabled": o.EnableLeaderMigration,
			},
			"KubeCloudShared": map[string]any{
				"CloudProvider":                map[string]any{"Name": o.CloudProvider, "CloudConfigFile": o.CloudConfig},
				"UseServiceAccountCredentials": o.UseServiceAccountCredentials,
				"AllowUntaggedCloud":           o.AllowUntaggedCloud,
				"RouteReconciliationPeriod":    o.RouteReconciliationPeriod.String(),
				"NodeMonitorPeriod":            o.NodeMonitorPeriod.String(),
				"ClusterName":                  o.ClusterName, "ClusterCIDR": o.ClusterCIDR,
				"AllocateNodeCIDRs": o.AllocateNodeCIDRs, "CIDRAllocatorType": o.CIDRAllocatorType,
				"ConfigureCloudRoutes": o.ConfigureCloudRoutes,
			},
			"ServiceController":         map[string]any{"ConcurrentServiceSyncs": o.ServiceWorkers()},
			"NodeController":            map[string]any{"ConcurrentNodeSyncs": o.NodeWorkers(), "ConcurrentNodeStatusUpdates": o.StatusUpdateWorkers()},
			"NodeLifecycleController":   map[string]any{"ConcurrentNodeSyncs": o.LifecycleWorkers()},
			"NodeStatusUpdateFrequency": o.NodeStatusUpdateFrequency.String(),
			"Outrigger": map[string]any{
				"LoadBalancerClass": o.LoadBalancerClass, "CloudQPS": o.CloudQPS, "CloudBurst": o.CloudBurst,
				"CloudCallTimeout":     o.CloudCallTimeout.String(),
				"NodeCIDRMaskSizeIPv4": o.NodeCIDRMaskSizeIPv4, "NodeCIDRMaskSizeIPv6": o.NodeCIDRMaskSizeIPv6,
			},
		}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cfg)
	})
}

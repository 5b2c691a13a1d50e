{{/* Labels on every object. */}}
{{- define "outrigger.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "outrigger.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: cloud-controller-manager
{{- end }}

{{/* The Deployment's selector: immutable, so only what never changes. */}}
{{- define "outrigger.selectorLabels" -}}
app.kubernetes.io/name: outrigger
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "outrigger.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default "cloud-controller-manager" }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end }}

{{/* The Secret mounted at /etc/outrigger, or nothing. */}}
{{- define "outrigger.cloudConfigSecret" -}}
{{- if and .Values.cloudConfig.content .Values.cloudConfig.existingSecret -}}
{{- fail "cloudConfig: set content or existingSecret, not both" -}}
{{- end -}}
{{- if .Values.cloudConfig.existingSecret -}}
{{ .Values.cloudConfig.existingSecret }}
{{- else if .Values.cloudConfig.content -}}
{{ .Values.name }}-cloud-config
{{- end -}}
{{- end }}

{{/* --cloud-provider: grpc with a plugin, which needs no other. */}}
{{- define "outrigger.cloudProvider" -}}
{{- if .Values.plugin.enabled -}}
{{- if not (has .Values.cloudProvider (list "" "grpc")) -}}
{{- fail (printf "plugin.enabled needs cloudProvider grpc (or empty), not %q: Outrigger reaches the plugin through its grpc provider" .Values.cloudProvider) -}}
{{- end -}}
grpc
{{- else -}}
{{ .Values.cloudProvider }}
{{- end -}}
{{- end }}

{{/*
"true" when the plugin reaches the Kubernetes API, as a ServiceAccount of
its own (<name>-plugin) whose token Outrigger writes into the emptyDir
plugin-api-access; else empty. Refuses what cannot work with it.
*/}}
{{- define "outrigger.pluginAPIAccess" -}}
{{- if and .Values.plugin.enabled .Values.plugin.kubeAPIAccess -}}
{{- if .Values.tenants.enabled -}}
{{- fail "plugin.kubeAPIAccess does not go with tenants.enabled: the plugin's token is of one cluster's ServiceAccount" -}}
{{- end -}}
true
{{- else if and .Values.plugin.enabled .Values.rbac.extraRules -}}
{{- fail "rbac.extraRules are the plugin's own rights with plugin.enabled (the provider's code runs there): they need plugin.kubeAPIAccess, without which the plugin has no Kubernetes access" -}}
{{- end -}}
{{- end }}

{{/* The plugin's own ServiceAccount (plugin.kubeAPIAccess). */}}
{{- define "outrigger.pluginServiceAccountName" -}}
{{ .Values.name }}-plugin
{{- end }}

{{/*
Where the outrigger container writes the plugin's token, CA and namespace
(--plugin-api-access-dir); the plugin container mounts the same emptyDir
where the kubelet mounts a ServiceAccount's.
*/}}
{{- define "outrigger.pluginAPIAccessDir" -}}
/run/plugin-api-access
{{- end }}

{{/* The plugin's socket, in the emptyDir both containers mount at /run/outrigger. */}}
{{- define "outrigger.pluginEndpoint" -}}
unix:///run/outrigger/plugin.sock
{{- end }}

{{/*
The uid both ends of the plugin's socket run as (each admits only its own),
refusing a runAsUser set elsewhere to another.
*/}}
{{- define "outrigger.pluginUID" -}}
{{- $uid := int .Values.plugin.runAsUser -}}
{{- range $where, $sc := dict "securityContext" .Values.securityContext "plugin.securityContext" .Values.plugin.securityContext -}}
{{- if and $sc (hasKey $sc "runAsUser") (ne (int $sc.runAsUser) $uid) -}}
{{- fail (printf "%s.runAsUser (%v) differs from plugin.runAsUser (%d): the plugin's socket admits only processes of its own uid" $where $sc.runAsUser $uid) -}}
{{- end -}}
{{- end -}}
{{ $uid }}
{{- end }}

{{/* The container's arguments, one YAML list item a line. */}}
{{- define "outrigger.args" -}}
- --cloud-provider={{ required "cloudProvider is required: the provider name registered in the image's binary, e.g. --set cloudProvider=grpc" (include "outrigger.cloudProvider" .) }}
{{- if .Values.plugin.enabled }}
- --cloud-config=/etc/outrigger/grpc.yaml
{{- else if include "outrigger.cloudConfigSecret" . }}
- --cloud-config=/etc/outrigger/{{ .Values.cloudConfig.key }}
{{- end }}
- --leader-elect=true
- --leader-elect-retry-period=1s
{{- if not .Values.profiling }}
- --profiling=false
{{- end }}
{{- if .Values.useServiceAccountCredentials }}
- --use-service-account-credentials=true
{{- end }}
{{- with .Values.controllers }}
- --controllers={{ join "," . }}
{{- end }}
{{- with .Values.clusterCIDR }}
- --cluster-cidr={{ . }}
{{- end }}
{{- if .Values.allocateNodeCIDRs }}
- --allocate-node-cidrs=true
{{- end }}
{{- if kindIs "bool" .Values.configureCloudRoutes }}
- --configure-cloud-routes={{ .Values.configureCloudRoutes }}
{{- end }}
{{- if eq .Values.bindAddress "podIP" }}
- --bind-address=$(POD_IP)
{{- else if .Values.bindAddress }}
- --bind-address={{ .Values.bindAddress }}
{{- end }}
{{- if ne (int .Values.securePort) 10258 }}
- --secure-port={{ .Values.securePort }}
{{- end }}
{{- if .Values.tenants.enabled }}
- --tenants-namespace={{ include "outrigger.tenantsNamespace" . }}
- --tenants-selector={{ .Values.tenants.selector }}
- --tenants-replica-id=$(POD_NAME)
{{- end }}
{{- if include "outrigger.pluginAPIAccess" . }}
- --plugin-service-account={{ .Release.Namespace }}/{{ include "outrigger.pluginServiceAccountName" . }}
- --plugin-api-access-dir={{ include "outrigger.pluginAPIAccessDir" . }}
{{- end }}
{{- if .Values.gateway.enabled }}
- --gateway-data-plane-image={{ .Values.gateway.dataPlaneImage | default (include "outrigger.image" .) }}
{{- if ne .Values.gateway.namespace "outrigger-gateways" }}
- --gateway-namespace={{ .Values.gateway.namespace }}
{{- end }}
{{- if eq .Values.gateway.namespaceMode "gateway" }}
- --gateway-namespace-mode=gateway
{{- end }}
{{- end }}
{{- if kindIs "slice" .Values.extraArgs }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- else }}
{{- range $k, $v := .Values.extraArgs }}
- {{ printf "--%s=%v" (trimPrefix "--" $k) $v | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The plugin container's arguments: the socket (--endpoint, as plugin.Main
and the examples take it), the provider's cloud-config when given, then
plugin.args.
*/}}
{{- define "outrigger.pluginArgs" -}}
- --endpoint={{ include "outrigger.pluginEndpoint" . }}
{{- if include "outrigger.cloudConfigSecret" . }}
- --cloud-config=/etc/outrigger/{{ .Values.cloudConfig.key }}
{{- end }}
{{- range .Values.plugin.args }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The Outrigger image: repository@digest when image.digest is set (a released
chart: the image a release verification checked), else repository:tag.
*/}}
{{- define "outrigger.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The namespace of the tenants' Secrets and Leases: tenants.namespace, or the
release's.
*/}}
{{- define "outrigger.tenantsNamespace" -}}
{{ .Values.tenants.namespace | default .Release.Namespace }}
{{- end }}

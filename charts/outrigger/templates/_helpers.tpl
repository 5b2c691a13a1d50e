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

{{/* The container's arguments, one YAML list item a line. */}}
{{- define "outrigger.args" -}}
- --cloud-provider={{ required "cloudProvider is required: the provider name registered in the image's binary, e.g. --set cloudProvider=grpc" .Values.cloudProvider }}
{{- if include "outrigger.cloudConfigSecret" . }}
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
{{- if ne (int .Values.securePort) 10258 }}
- --secure-port={{ .Values.securePort }}
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

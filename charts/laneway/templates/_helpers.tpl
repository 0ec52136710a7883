{{/* The chart's name, or nameOverride. */}}
{{- define "laneway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The release's full name, used for every object: fullnameOverride, else the release name when it
already contains the chart name, else "<release>-<chart>". At most 63 characters (DNS label).
*/}}
{{- define "laneway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "laneway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the operator's pods; never change them after a release exists. */}}
{{- define "laneway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "laneway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "laneway.labels" -}}
helm.sh/chart: {{ include "laneway.chart" . }}
{{ include "laneway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: laneway
{{- end -}}

{{/* The ServiceAccount the operator runs as, and that the RBAC binds. */}}
{{- define "laneway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "laneway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "laneway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
What the operator does in every namespace it watches (a ClusterRole in cluster mode, a Role in
each watched namespace otherwise). Each rule says why it is needed.
*/}}
{{- define "laneway.watchRules" -}}
# Pods are the instances: their labels (lane label, selectors), IPs, ports and readiness.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Services: user Services are read for selectors and ports; lane and baseline Services are
# created, replaced at the version seen (update) and deleted when no longer wanted.
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, update, delete]
# EndpointSlices of the lane and baseline Services: watched (own slices only, by label),
# created, replaced at the version seen (update) and deleted when no longer wanted.
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, update, delete]
# LaneRoutes, TagRules and LaneEntries are the input; patch adds and removes the
# laneway.io/cleanup finalizer (JSON patch). No create, update or delete: users own these.
- apiGroups: [laneway.io]
  resources: [laneroutes, tagrules, laneentries]
  verbs: [get, list, watch, patch]
# Status (observedGeneration, per-service sources, routes' verdicts, conditions), replaced
# whole (update) at the version seen.
- apiGroups: [laneway.io]
  resources: [laneroutes/status, tagrules/status, laneentries/status]
  verbs: [update]
# HTTPRoutes: the LaneEntries' routes are written by server-side apply and deleted when no
# longer wanted; everyone's are read to report routes that would tie with them.
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, list, watch, create, patch, delete]
# Events (SubsetChanged, problems) on LaneRoutes, TagRules and LaneEntries; repeats patch the
# series.
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/* The ports ZooKeeper and Nacos listen on, from their configured addresses. */}}
{{- define "laneway.configCentrePorts" -}}
{{- $ports := list -}}
{{- range .Values.configCentres.zookeeper.addresses -}}
{{- $ports = append $ports (last (splitList ":" .) | int) -}}
{{- end -}}
{{- with .Values.configCentres.nacos.address -}}
{{- $url := urlParse . -}}
{{- $hostPort := splitList ":" $url.host -}}
{{- if gt (len $hostPort) 1 -}}
{{- $ports = append $ports (last $hostPort | int) -}}
{{- else if eq $url.scheme "https" -}}
{{- $ports = append $ports 443 -}}
{{- else -}}
{{- $ports = append $ports 80 -}}
{{- end -}}
{{- end -}}
{{- $ports | uniq | toJson -}}
{{- end -}}

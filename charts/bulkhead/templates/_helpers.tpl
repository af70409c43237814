{{/* Chart name, truncated to 63 characters. */}}
{{- define "bulkhead.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, unless it already contains the chart name. */}}
{{- define "bulkhead.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "bulkhead.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bulkhead.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "bulkhead.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "bulkhead.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "bulkhead.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bulkhead.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Service's cluster-local DNS name: what Envoys and Istio dial. */}}
{{- define "bulkhead.serviceFQDN" -}}
{{- printf "%s.%s.svc.cluster.local" (include "bulkhead.fullname" .) .Release.Namespace }}
{{- end }}

{{/* Bulkhead's address for plain Envoys. */}}
{{- define "bulkhead.envoyAddress" -}}
{{- default (include "bulkhead.serviceFQDN" .) .Values.envoy.address }}
{{- end }}

{{/*
The replica guard: permits of the in-memory ledger are per process, so two
replicas would each enforce the full limit.
*/}}
{{- define "bulkhead.checkReplicas" -}}
{{- if and (eq .Values.ledger "memory") (gt (int .Values.replicaCount) 1) }}
{{- fail (printf "replicaCount %d refused: with ledger \"memory\" every replica keeps its own permits, so %d replicas would each admit the full max_concurrent of every bulkhead (%dx the intended limit). Run one replica (the PodDisruptionBudget and a fast restart cover availability) until a shared ledger is available." (int .Values.replicaCount) (int .Values.replicaCount) (int .Values.replicaCount)) }}
{{- end }}
{{- end }}

{{/* Regex (for relabelling) of the bulkheads marked critical; "" if none. */}}
{{- define "bulkhead.criticalRegex" -}}
{{- $names := list }}
{{- range $name, $b := .Values.bulkheads }}
{{- if $b.critical }}
{{- $names = append $names (regexQuoteMeta $name) }}
{{- end }}
{{- end }}
{{- join "|" (sortAlpha $names) }}
{{- end }}

{{/* The daemon's bulkheads map: the values' map less the chart-only keys. */}}
{{- define "bulkhead.daemonBulkheads" -}}
{{- $out := dict }}
{{- range $name, $b := .Values.bulkheads }}
{{- $_ := set $out $name (omit $b "critical" "priority" "istio") }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
The heartbeat interval: the daemon's leases.heartbeat_interval (its default,
1s, when unset), which every Envoy must use as its access_log_flush_interval.
The schema keeps it in seconds ("1s", "0.5s"), a form both Go and Envoy
read. "" when heartbeat leases are off ("0"): Envoys then send no periodic
entries.
*/}}
{{- define "bulkhead.heartbeatInterval" -}}
{{- $leases := dig "leases" dict (.Values.config | default dict) | default dict }}
{{- $i := dig "heartbeat_interval" "1s" $leases | default "1s" | toString }}
{{- if not (regexMatch "^0+(\\.0*)?s?$" $i) }}{{ $i }}{{ end }}
{{- end }}

{{/*
The buffer_flush_interval of the Envoys' heartbeat logger (the periodic
entries' own, batched gRPC access logger): a quarter of the heartbeat
interval, as envoy/front-proxy.yaml.tmpl sets it. A periodic entry then
arrives at most 1.25 intervals after the one before, well within
leases.heartbeat_ttl (at least 2 intervals). "" when heartbeat leases are off.
*/}}
{{- define "bulkhead.heartbeatFlushInterval" -}}
{{- $i := include "bulkhead.heartbeatInterval" . }}
{{- if $i }}{{ printf "%gs" (divf ($i | trimSuffix "s" | float64) 4) }}{{ end }}
{{- end }}

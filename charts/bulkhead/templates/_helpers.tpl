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

{{/*
Bulkhead's address for plain Envoys. With the Redis ledger, the headless
Service: its name resolves to every ready replica, and Envoy's STRICT_DNS
cluster balances Checks across them (a ClusterIP would pin each HTTP/2
connection to one pod).
*/}}
{{- define "bulkhead.envoyAddress" -}}
{{- if .Values.envoy.address }}
{{- .Values.envoy.address }}
{{- else if eq (include "bulkhead.ledgerBackend" .) "redis" }}
{{- printf "%s-headless.%s.svc.cluster.local" (include "bulkhead.fullname" .) .Release.Namespace }}
{{- else }}
{{- include "bulkhead.serviceFQDN" . }}
{{- end }}
{{- end }}

{{/* The ledger backend: config.ledger.backend, "memory" when unset. */}}
{{- define "bulkhead.ledgerBackend" -}}
{{- dig "ledger" "backend" "memory" (.Values.config | default dict) | default "memory" }}
{{- end }}

{{/*
The ledger guard. Permits of the in-memory ledger are per process, so two
replicas would each enforce the full limit: more than one replica needs the
Redis ledger. The values that set a daemon *_file key from a Secret must not
also set that key by hand, a Redis Cluster has no Sentinel, and a top-level
`ledger` (chart 0.1) has moved. Shares need the in-memory ledger, and a
bulkhead's shares.classes (the snippet's route pairs) its shares mode.
*/}}
{{- define "bulkhead.checkLedger" -}}
{{- $n := int .Values.replicaCount }}
{{- $backend := include "bulkhead.ledgerBackend" . }}
{{- if hasKey .Values "ledger" }}
{{- fail "ledger: moved to config.ledger.backend (memory | redis); remove the top-level `ledger` value" }}
{{- end }}
{{- if and (eq $backend "memory") (gt $n 1) }}
{{- fail (printf "replicaCount %d refused: with ledger \"memory\" every replica keeps its own permits, so %d replicas would each admit the full max_concurrent of every bulkhead (%dx the intended limit). Set config.ledger.backend: redis (and config.ledger.redis.address or .sentinel) so that the replicas share one ledger (docs/redis.md), or run one replica (the PodDisruptionBudget and a fast restart cover availability)." $n $n $n) }}
{{- end }}
{{- $redis := dig "ledger" "redis" dict (.Values.config | default dict) | default dict }}
{{- if eq $backend "redis" }}
{{- if not (or (get $redis "address") (dig "sentinel" "master" "" $redis)) }}
{{- fail "config.ledger.backend is redis: set config.ledger.redis.address (host:port) or config.ledger.redis.sentinel (master and addresses)" }}
{{- end }}
{{- end }}
{{- if and (get $redis "cluster") (or (dig "sentinel" "master" "" $redis) (dig "sentinel" "addresses" list $redis)) }}
{{- fail "config.ledger.redis.cluster and config.ledger.redis.sentinel are both set: a Redis Cluster fails over by itself; set cluster with address (the cluster's configuration endpoint), or sentinel without cluster" }}
{{- end }}
{{- if and .Values.redis.passwordSecret.name (get $redis "password_file") }}
{{- fail "config.ledger.redis.password_file and redis.passwordSecret are both set: the chart sets password_file from the Secret; remove one" }}
{{- end }}
{{- if and .Values.redis.sentinelPasswordSecret.name (dig "sentinel" "password_file" "" $redis) }}
{{- fail "config.ledger.redis.sentinel.password_file and redis.sentinelPasswordSecret are both set: the chart sets it from the Secret; remove one" }}
{{- end }}
{{- range $name, $b := .Values.bulkheads }}
{{- if and (dig "shares" "classes" list $b) (or $b.connections (eq (dig "shares" "mode" "strict" $b) "strict")) }}
{{- fail (printf "bulkheads.%s.shares.classes renders share route pairs: it needs shares.mode shares or auto on a request bulkhead (no connections)" $name) }}
{{- end }}
{{- end }}
{{- if and (ne $backend "memory") (eq (toString (dig "capacity_leases" true $redis)) "false") }}
{{- range $name, $b := .Values.bulkheads }}
{{- if ne (dig "shares" "mode" "strict" $b) "strict" }}
{{- fail (printf "bulkheads.%s.shares.mode %s: shares on the Redis ledger are held from capacity leases (the daemon refuses them without); remove config.ledger.redis.capacity_leases: false, or use mode strict" $name (dig "shares" "mode" "" $b)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $tls := get $redis "tls" | default dict }}
{{- if and .Values.redis.tlsSecret.name (or (get $tls "ca_file") (get $tls "cert_file") (get $tls "key_file")) }}
{{- fail "config.ledger.redis.tls.*_file and redis.tlsSecret are both set: the chart sets the TLS files from the Secret; remove one" }}
{{- end }}
{{- end }}

{{/* Where the Redis ledger's Secrets are mounted. */}}
{{- define "bulkhead.redisSecretDir" -}}/var/run/bulkhead/redis{{- end }}

{{/*
grpcTLS and the snippet's envoy.tls agree: with the snippet on, an Envoy
made from it connects the way the daemon listens.
*/}}
{{- define "bulkhead.checkGRPCTLS" -}}
{{- $t := .Values.envoy.tls }}
{{- if ne (empty $t.certFile) (empty $t.keyFile) }}
{{- fail "envoy.tls.certFile and envoy.tls.keyFile: set both (the Envoy's client certificate for mutual TLS) or neither" }}
{{- end }}
{{- if .Values.envoy.snippet.enabled }}
{{- if and .Values.grpcTLS.secret.name (not $t.caFile) }}
{{- fail "grpcTLS.secret.name is set but envoy.tls.caFile is empty: Envoys made from the chart's snippet would connect in plaintext to a TLS listener; set envoy.tls.caFile (the CA that signed the daemon's certificate)" }}
{{- end }}
{{- if and $t.caFile (not .Values.grpcTLS.secret.name) }}
{{- fail "envoy.tls.caFile is set but grpcTLS.secret.name is empty: the daemon would listen in plaintext; set grpcTLS.secret.name" }}
{{- end }}
{{- if and .Values.grpcTLS.secret.clientCAKey (not $t.certFile) }}
{{- fail "grpcTLS.secret.clientCAKey requires a client certificate (mutual TLS): set envoy.tls.certFile and envoy.tls.keyFile" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where the Deployment mounts grpcTLS.secret and admin.tlsSecret. */}}
{{- define "bulkhead.grpcTLSDir" -}}/var/run/bulkhead/grpc-tls{{- end }}
{{- define "bulkhead.adminTLSDir" -}}/var/run/bulkhead/admin-tls{{- end }}

{{/* admin.tls from admin.tlsSecret (with admin.enabled): the daemon's keys, or "". */}}
{{- define "bulkhead.adminTLS" -}}
{{- with .Values.admin.tlsSecret }}
{{- if .name }}
{{- if not $.Values.admin.enabled }}
{{- fail "admin.tlsSecret.name is set but admin.enabled is false: the admin listener is on the pod's loopback; set admin.enabled (with admin.tokenSecret) or leave admin.tlsSecret.name empty" }}
{{- end }}
{{- $dir := include "bulkhead.adminTLSDir" $ }}
{{- $tls := dict "cert_file" (printf "%s/%s" $dir .certKey) "key_file" (printf "%s/%s" $dir .keyKey) }}
{{- with .clientCAKey }}{{ $_ := set $tls "client_ca_file" (printf "%s/%s" $dir .) }}{{ end }}
{{- toYaml $tls }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The daemon's listen keys beyond the addresses: config.listen, and
grpc_tls from grpcTLS.secret (the files the Deployment mounts).
*/}}
{{- define "bulkhead.listenExtra" -}}
{{- $l := deepCopy (.Values.config.listen | default dict) }}
{{- with .Values.grpcTLS.secret }}
{{- if .name }}
{{- $dir := include "bulkhead.grpcTLSDir" $ }}
{{- $tls := dict "cert_file" (printf "%s/%s" $dir .certKey) "key_file" (printf "%s/%s" $dir .keyKey) }}
{{- with .clientCAKey }}{{ $_ := set $tls "client_ca_file" (printf "%s/%s" $dir .) }}{{ end }}
{{- $_ := set $l "grpc_tls" $tls }}
{{- end }}
{{- end }}
{{- if $l }}{{ toYaml $l }}{{ end }}
{{- end }}

{{/*
The daemon's settings: config, with the ledger's *_file keys pointed at the
Secrets of `redis:` (mounted by the Deployment under redisSecretDir).
*/}}
{{- define "bulkhead.daemonConfig" -}}
{{- $c := omit (deepCopy (.Values.config | default dict)) "listen" }}
{{- $r := .Values.redis }}
{{- if or $r.passwordSecret.name $r.sentinelPasswordSecret.name $r.tlsSecret.name }}
{{- $dir := include "bulkhead.redisSecretDir" . }}
{{- $ledger := get $c "ledger" | default dict }}
{{- $redis := get $ledger "redis" | default dict }}
{{- with $r.passwordSecret.name }}
{{- $_ := set $redis "password_file" (printf "%s/password/%s" $dir $r.passwordSecret.key) }}
{{- end }}
{{- with $r.sentinelPasswordSecret.name }}
{{- $sentinel := get $redis "sentinel" | default dict }}
{{- $_ := set $sentinel "password_file" (printf "%s/sentinel-password/%s" $dir $r.sentinelPasswordSecret.key) }}
{{- $_ := set $redis "sentinel" $sentinel }}
{{- end }}
{{- with $r.tlsSecret.name }}
{{- $tls := get $redis "tls" | default dict }}
{{- $_ := set $tls "enabled" true }}
{{- with $r.tlsSecret.caKey }}{{ $_ := set $tls "ca_file" (printf "%s/tls/%s" $dir .) }}{{ end }}
{{- with $r.tlsSecret.certKey }}{{ $_ := set $tls "cert_file" (printf "%s/tls/%s" $dir .) }}{{ end }}
{{- with $r.tlsSecret.keyKey }}{{ $_ := set $tls "key_file" (printf "%s/tls/%s" $dir .) }}{{ end }}
{{- $_ := set $redis "tls" $tls }}
{{- end }}
{{- $_ := set $ledger "redis" $redis }}
{{- $_ := set $c "ledger" $ledger }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/*
The pod's affinity: the values' own, or with more than one replica a
preferred anti-affinity by node, so that one node's loss takes at most one
replica where the cluster has room.
*/}}
{{- define "bulkhead.affinity" -}}
{{- if .Values.affinity }}
{{- toYaml .Values.affinity }}
{{- else if gt (int .Values.replicaCount) 1 }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "bulkhead.selectorLabels" . | nindent 12 }}
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

{{/* The names of the bulkheads that count requests, or "" if none. */}}
{{- define "bulkhead.requestBulkheads" -}}
{{- range $name, $b := .Values.bulkheads }}{{ if not $b.connections }}{{ $name }} {{ end }}{{ end }}
{{- end }}

{{/* The names of the bulkheads that count connections, or "" if none. */}}
{{- define "bulkhead.connectionBulkheads" -}}
{{- range $name, $b := .Values.bulkheads }}{{ if $b.connections }}{{ $name }} {{ end }}{{ end }}
{{- end }}

{{/*
The names of the request bulkheads in shares.mode shares or auto (they get
a route pair and a share cluster in the Envoy snippet), or "" if none.
*/}}
{{- define "bulkhead.sharesBulkheads" -}}
{{- range $name, $b := .Values.bulkheads }}{{ if and (not $b.connections) (ne (dig "shares" "mode" "strict" $b) "strict") }}{{ $name }} {{ end }}{{ end }}
{{- end }}

{{/*
The share classes of a bulkhead in the Envoy snippet, space-separated,
critical first (its pair's match is the more specific one): shares.classes
(chart only) when set, else the one class of its priority (critical, or
normal for any other priority). Each class gets a route pair and a share
cluster. The argument is a bulkhead.
*/}}
{{- define "bulkhead.sharesClasses" -}}
{{- $classes := dig "shares" "classes" list . | default (list (eq (dig "priority" "" .) "critical" | ternary "critical" "normal")) }}
{{- if has "critical" $classes }}critical {{ end }}
{{- if has "normal" $classes }}normal{{ end }}
{{- end }}

{{/*
The share cluster of a bulkhead's route pair of one class in the Envoy
snippet: its shares.cluster (default <name>_shares), and "_critical" after it
for the critical class, the critical share cluster the daemon sizes apart
(shares.CriticalCluster; envoy.Route.SharesCluster names the same). The
argument is (list name bulkhead class).
*/}}
{{- define "bulkhead.sharesCluster" -}}
{{- $name := index . 0 }}
{{- $b := index . 1 }}
{{- dig "shares" "cluster" (printf "%s_shares" $name) $b }}
{{- if eq (index . 2) "critical" }}_critical{{ end }}
{{- end }}

{{/*
The runtime key that gates the strict route of a bulkhead's route pair of one
class: bulkhead.strict.<name>, or bulkhead.strict_critical.<name> for the
critical class (shares.StrictKey, shares.CriticalStrictKey;
envoy.Route.StrictKey). The argument is (list name bulkhead class).
*/}}
{{- define "bulkhead.sharesStrictKey" -}}
{{- $name := index . 0 }}
{{- if eq (index . 2) "critical" }}bulkhead.strict_critical.{{ $name }}
{{- else }}bulkhead.strict.{{ $name }}
{{- end }}
{{- end }}

{{/*
The bulkhead as the strict route of its pair of one class sees it: priority
critical for the critical class; for the normal class its own priority, or
normal in place of critical (the normal share is not critical's), or none.
The argument is (list bulkhead class); routeAuthz takes the result.
*/}}
{{- define "bulkhead.sharesPairBulkhead" -}}
{{- $b := index . 0 }}
{{- $p := eq (index . 1) "critical" | ternary "critical" (dig "priority" "" $b) }}
{{- if and (eq (index . 1) "normal") (eq $p "critical") }}{{ $p = "normal" }}{{ end }}
{{- $out := omit $b "priority" }}
{{- if $p }}{{ $_ := set $out "priority" $p }}{{ end }}
{{- toJson $out }}
{{- end }}

{{/*
The share routes' timeout: the daemon's shares.max_request_duration (its
default, 5s, when unset), in seconds as the schema keeps it, a form both Go
and Envoy read.
*/}}
{{- define "bulkhead.sharesMaxRequest" -}}
{{- dig "shares" "max_request_duration" "5s" (.Values.config | default dict) | default "5s" }}
{{- end }}

{{/*
A request bulkhead's per-route ext_authz block (typed_per_filter_config):
it names the bulkhead, and the class of the route's requests if the
bulkhead has a priority. The argument is (list name bulkhead).
*/}}
{{- define "bulkhead.routeAuthz" -}}
{{- $name := index . 0 }}
{{- $b := index . 1 -}}
envoy.filters.http.ext_authz:
  "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
  check_settings:
    context_extensions:
      bulkhead: {{ $name | quote }}
      {{- with $b.priority }}
      priority: {{ . | quote }}
      {{- end }}
{{- end }}

{{/* The daemon's bulkheads map: the values' map less the chart-only keys (shares.classes included). */}}
{{- define "bulkhead.daemonBulkheads" -}}
{{- $out := dict }}
{{- range $name, $b := .Values.bulkheads }}
{{- $d := omit $b "critical" "priority" "istio" }}
{{- if hasKey $b "shares" }}
{{- $_ := set $d "shares" (omit $b.shares "classes") }}
{{- end }}
{{- $_ := set $out $name $d }}
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

{{/*
An access-log filter, as one flow-style line: log only what holds a permit
(the permit token in the ext_authz filter's dynamic metadata; the argument
is the filter's namespace). Denied and unguarded requests release nothing.
*/}}
{{- define "bulkhead.permitLogFilter" -}}
metadata_filter: {matcher: {filter: {{ . | quote }}, path: [{key: bulkhead_permit}], value: {present_match: true}}, match_if_key_not_found: false}
{{- end }}

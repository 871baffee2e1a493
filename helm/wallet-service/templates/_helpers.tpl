{{/*
Names and labels.
*/}}
{{- define "wallet-service.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wallet-service.fullname" -}}
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

{{- define "wallet-service.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wallet-service.labels" -}}
helm.sh/chart: {{ include "wallet-service.chart" . }}
{{ include "wallet-service.selectorLabels" . }}
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: wallet-service
{{- end }}

{{- define "wallet-service.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wallet-service.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one component: (dict "root" $ "component" "api") */}}
{{- define "wallet-service.componentSelectorLabels" -}}
{{ include "wallet-service.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "wallet-service.componentLabels" -}}
{{ include "wallet-service.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "wallet-service.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end }}

{{- define "wallet-service.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "wallet-service.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The migration hook runs before the release's own ServiceAccount exists. */}}
{{- define "wallet-service.migrationServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}default{{ else }}{{ default "default" .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{- define "wallet-service.secretName" -}}
{{- required "existingSecret is required: the name of a Secret holding WALLET_DATABASE_URL, WALLET_REDIS_URL, WALLET_JWT_SECRET and WALLET_SECRET_KEY (see values.yaml)" .Values.existingSecret }}
{{- end }}

{{/*
Settings. Every WALLET_* variable the process knows is a field of `Config` in
api/src/config/mod.rs; any other WALLET_* variable makes it refuse to start.
*/}}
{{- define "wallet-service.secretKeys.required" -}}
WALLET_DATABASE_URL WALLET_REDIS_URL WALLET_JWT_SECRET WALLET_SECRET_KEY
{{- end }}
{{- define "wallet-service.secretKeys.optional" -}}
WALLET_SMS_PROVIDER_TOKEN WALLET_JWT_PREVIOUS_SECRETS WALLET_DATABASE_DIRECT_URL WALLET_DATABASE_REPLICA_URL
{{- end }}
{{/* Set by the chart per component: API WALLET_LISTEN_ADDR=0.0.0.0:8080 and
WALLET_RUN_WORKERS=false; API and worker WALLET_METRICS_LISTEN_ADDR=0.0.0.0:9091. */}}
{{- define "wallet-service.chartManagedKeys" -}}
WALLET_LISTEN_ADDR WALLET_RUN_WORKERS WALLET_METRICS_LISTEN_ADDR
{{- end }}
{{- define "wallet-service.configKeys" -}}
WALLET_DATA_DIR WALLET_DATABASE_POOLER WALLET_REDIS_MODE WALLET_CELL WALLET_REPLICA_MAX_LAG_MS WALLET_REPLICA_WAIT_MS WALLET_JWT_KID WALLET_LOG_FORMAT WALLET_MAX_BODY_BYTES WALLET_KEY_CACHE_TTL_SECS WALLET_BCRYPT_COST WALLET_REDIS_TIMEOUT_MS WALLET_DB_ACQUIRE_TIMEOUT_MS WALLET_DB_MAX_CONNECTIONS WALLET_REDIS_PREFIX WALLET_JOB_MAX_ATTEMPTS WALLET_JOB_BACKOFF_BASE_MS WALLET_JOB_BACKOFF_MAX_MS WALLET_JOB_TIMEOUT_MS WALLET_JOB_CONCURRENCY WALLET_OUTBOX_POLL_MS WALLET_SMS_PROVIDER_URL WALLET_SMS_PROVIDER_TIMEOUT_MS WALLET_IDEMPOTENCY_TTL_HOURS WALLET_IDEMPOTENCY_WAIT_MS WALLET_OTP_SENDS_PER_WALLET WALLET_ENROLLMENT_WINDOW_SECS WALLET_SWEEP_INTERVAL_SECS WALLET_ENROLLMENT_LINK_BASE WALLET_CHECKOUT_SESSION_TTL_SECS WALLET_RATE_LIMIT WALLET_RATE_LIMIT_SANDBOX WALLET_RATE_LIMIT_WINDOW_SECS WALLET_DB_LOCK_TIMEOUT_MS WALLET_DB_STATEMENT_TIMEOUT_MS WALLET_REQUEST_TIMEOUT_MS WALLET_MAX_INFLIGHT_REQUESTS WALLET_MAX_QUEUED_REQUESTS WALLET_JOB_HEARTBEAT_SECS WALLET_WEBHOOK_MAX_ATTEMPTS WALLET_WEBHOOK_BACKOFF_BASE_MS WALLET_WEBHOOK_BACKOFF_MAX_MS WALLET_WEBHOOK_TIMEOUT_MS WALLET_WEBHOOK_CONCURRENCY WALLET_WEBHOOK_DISABLE_AFTER_FAILURES WALLET_WEBHOOK_DISABLE_AFTER_SECS WALLET_WEBHOOK_SECRET_GRACE_SECS WALLET_OPS_SESSION_SECS WALLET_OPS_SIGN_IN_FAILURES_PER_CLIENT WALLET_OPS_SIGN_IN_FAILURES_PER_PREFIX WALLET_OPS_SIGN_IN_WINDOW_SECS WALLET_RETENTION_INTERVAL_SECS WALLET_RETENTION_BATCH_ROWS WALLET_RETENTION_JOBS_DAYS WALLET_RETENTION_WEBHOOK_DAYS WALLET_RETENTION_SANDBOX_MESSAGES_DAYS WALLET_REPORT_RETENTION_DAYS WALLET_REPORT_TIMEOUT_SECS WALLET_SNAPSHOT_INTERVAL_SECS WALLET_RISK_TERMINAL_FAILURES WALLET_RISK_BRANCH_FAILURES WALLET_RISK_MERCHANT_FAILURES WALLET_RISK_FAILURE_WINDOW_SECS
{{- end }}
{{/* Real settings the chart refuses in production. */}}
{{- define "wallet-service.refusedKeys" -}}
WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS
{{- end }}

{{/*
Checks one config map: (dict "values" $map "where" "config"). Fails the render on a
secret, a chart-managed or an unknown key.
*/}}
{{- define "wallet-service.validateConfig" -}}
{{- $secrets := concat (splitList " " (include "wallet-service.secretKeys.required" .)) (splitList " " (include "wallet-service.secretKeys.optional" .)) }}
{{- $managed := splitList " " (include "wallet-service.chartManagedKeys" .) }}
{{- $known := splitList " " (include "wallet-service.configKeys" .) }}
{{- $refused := splitList " " (include "wallet-service.refusedKeys" .) }}
{{- range $k, $v := .values }}
{{- if has $k $refused }}
{{- fail (printf "%s.%s: not in production: it lets webhooks reach private, loopback and metadata addresses (tests and local setups only)" $.where $k) }}
{{- else if has $k $secrets }}
{{- fail (printf "%s.%s: %s is a secret; put it in the Secret named by existingSecret, never in values" $.where $k $k) }}
{{- else if has $k $managed }}
{{- fail (printf "%s.%s: %s is set by the chart (API: WALLET_LISTEN_ADDR=0.0.0.0:8080, WALLET_RUN_WORKERS=false; API and worker: WALLET_METRICS_LISTEN_ADDR=0.0.0.0:9091); remove it" $.where $k $k) }}
{{- else if not (has $k $known) }}
{{- fail (printf "%s.%s: unknown setting; the service refuses to start on an unknown WALLET_* variable. Known: %s" $.where $k (join ", " $known)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* A value as an environment string; whole numbers never turn into 1e+06. */}}
{{- define "wallet-service.envValue" -}}
{{- if kindIs "float64" . }}{{ if eq (float64 (int64 .)) . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else }}{{ toString . }}{{ end }}
{{- end }}

{{/* The shared config as KEY: "value" lines (ConfigMap data), empty values skipped. */}}
{{- define "wallet-service.configData" -}}
{{- include "wallet-service.validateConfig" (dict "values" .Values.config "where" "config") }}
{{- range $k, $v := .Values.config }}
{{- if not (or (kindIs "invalid" $v) (eq (toString $v) "")) }}
{{ $k }}: {{ include "wallet-service.envValue" $v | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* A config map as env entries: (dict "values" $map "where" "api.config"). */}}
{{- define "wallet-service.configEnv" -}}
{{- include "wallet-service.validateConfig" . }}
{{- range $k, $v := .values }}
{{- if not (or (kindIs "invalid" $v) (eq (toString $v) "")) }}
- name: {{ $k }}
  value: {{ include "wallet-service.envValue" $v | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Secret-backed env entries, shared by every container. With database.mode
cloudnativepg or external, the database URLs come from wallet-service.databaseEnv instead. */}}
{{- define "wallet-service.secretEnv" -}}
{{- $secret := include "wallet-service.secretName" . }}
{{- $chartDb := ne (include "wallet-service.databaseMode" .) "secret" }}
{{- $dbKeys := list "WALLET_DATABASE_URL" "WALLET_DATABASE_REPLICA_URL" }}
{{- range splitList " " (include "wallet-service.secretKeys.required" .) }}
{{- if not (and $chartDb (has . $dbKeys)) }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
{{- end }}
{{- end }}
{{- range splitList " " (include "wallet-service.secretKeys.optional" .) }}
{{- if not (and $chartDb (has . $dbKeys)) }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
      optional: true
{{- end }}
{{- end }}
{{- include "wallet-service.databaseEnv" . }}
{{- end }}

{{/* database.mode, checked with what it needs. */}}
{{- define "wallet-service.databaseMode" -}}
{{- $db := .Values.database | default dict }}
{{- $mode := $db.mode | default "secret" }}
{{- if eq $mode "cloudnativepg" }}
{{- if not $db.cloudnativepg.cluster }}
{{- fail "database.cloudnativepg.cluster: the name of the CloudNativePG Cluster (database.mode is cloudnativepg)" }}
{{- end }}
{{- else if eq $mode "external" }}
{{- if not $db.external.readWrite }}
{{- fail "database.external.readWrite: host:port that always reaches the primary (database.mode is external)" }}
{{- end }}
{{- if not $db.external.credentialsSecret }}
{{- fail "database.external.credentialsSecret: a Secret with keys username and password (database.mode is external)" }}
{{- end }}
{{- end }}
{{- $mode }}
{{- end }}

{{/*
The database URLs the chart builds (database.mode cloudnativepg or external). Kubernetes
expands $(NAME) in a value from the variables listed before it, so the credentials never
appear in the rendered manifest.
*/}}
{{- define "wallet-service.databaseEnv" -}}
{{- $mode := include "wallet-service.databaseMode" . }}
{{- $db := .Values.database }}
{{- if eq $mode "cloudnativepg" }}
{{- $c := $db.cloudnativepg }}
{{- $secret := $c.appSecret | default (printf "%s-app" $c.cluster) }}
{{- $ns := .Release.Namespace }}
# CloudNativePG's own URI of the primary's Service (<cluster>-rw), encoded by the operator.
- name: WALLET_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: uri
{{- if $c.readReplicas }}
- name: PG_APP_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: username
- name: PG_APP_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: password
- name: PG_APP_DBNAME
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: dbname
- name: WALLET_DATABASE_REPLICA_URL
  value: {{ printf "postgresql://$(PG_APP_USERNAME):$(PG_APP_PASSWORD)@%s-ro.%s.svc:5432/$(PG_APP_DBNAME)" $c.cluster $ns | quote }}
{{- end }}
{{- else if eq $mode "external" }}
{{- $e := $db.external }}
- name: PG_APP_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $e.credentialsSecret }}
      key: username
- name: PG_APP_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $e.credentialsSecret }}
      key: password
- name: WALLET_DATABASE_URL
  value: {{ printf "postgres://$(PG_APP_USERNAME):$(PG_APP_PASSWORD)@%s/%s?sslmode=%s" $e.readWrite $e.database $e.sslmode | quote }}
{{- if $e.readOnly }}
- name: WALLET_DATABASE_REPLICA_URL
  value: {{ printf "postgres://$(PG_APP_USERNAME):$(PG_APP_PASSWORD)@%s/%s?sslmode=%s" $e.readOnly $e.database $e.sslmode | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The OTEL_* variables the chart sets from `tracing` (API and worker only). */}}
{{- define "wallet-service.tracingKeys" -}}
OTEL_EXPORTER_OTLP_ENDPOINT OTEL_SERVICE_NAME OTEL_TRACES_SAMPLER OTEL_TRACES_SAMPLER_ARG OTEL_EXPORTER_OTLP_HEADERS
{{- end }}

{{/*
Standard OpenTelemetry variables for one process: (dict "root" $ "service" "wallet-api").
Nothing unless tracing.otlpEndpoint is set: OTLP export is on only when
OTEL_EXPORTER_OTLP_ENDPOINT is.
*/}}
{{- define "wallet-service.tracingEnv" -}}
{{- $t := .root.Values.tracing }}
{{- if $t.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.otlpEndpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ .service | quote }}
{{- if not (eq (toString $t.sampleRatio) "") }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ include "wallet-service.envValue" $t.sampleRatio | quote }}
{{- end }}
{{- if $t.headersSecret.key }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ default (include "wallet-service.secretName" .root) $t.headersSecret.name }}
      key: {{ $t.headersSecret.key }}
{{- end }}
{{- end }}
{{- end }}

{{/* extraEnv, with WALLET_* names and the chart's OTEL_* names refused. */}}
{{- define "wallet-service.extraEnv" -}}
{{- $otel := splitList " " (include "wallet-service.tracingKeys" .) }}
{{- range .Values.extraEnv }}
{{- if hasPrefix "WALLET_" (upper .name) }}
{{- fail (printf "extraEnv.%s: WALLET_* variables go in `config` (or in existingSecret), where they are checked" .name) }}
{{- else if has .name $otel }}
{{- fail (printf "extraEnv.%s: set by the chart from `tracing` (otlpEndpoint, sampleRatio, headersSecret)" .name) }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Pod-level settings every pod shares. */}}
{{- define "wallet-service.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
# Service links would inject <SERVICE>_PORT... variables; a Service whose name starts with
# "wallet" would turn them into unknown WALLET_* variables, which stop the process.
enableServiceLinks: false
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* Checksum of the rendered ConfigMap, so a config change rolls the pods. */}}
{{- define "wallet-service.configChecksum" -}}
{{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end }}

{{/*
NetworkPolicy pieces.
*/}}
{{- define "wallet-service.networkPolicy.validate" -}}
{{- $np := .Values.networkPolicy }}
{{- range $name := list "postgresql" "redis" "dns" }}
{{- if not (index $np $name).to }}
{{- fail (printf "networkPolicy.%s.to: list where it is (NetworkPolicyPeer: ipBlock, namespaceSelector, podSelector) when networkPolicy.enabled" $name) }}
{{- end }}
{{- end }}
{{- if not $np.metricsFrom }}
{{- fail "networkPolicy.metricsFrom: name your Prometheus (namespaceSelector/podSelector) when networkPolicy.enabled; nobody else may scrape /metrics" }}
{{- end }}
{{- if and .Values.tracing.otlpEndpoint (not $np.otlpCollector.to) }}
{{- fail "networkPolicy.otlpCollector.to: list where the OTLP collector is (tracing.otlpEndpoint is set and networkPolicy.enabled)" }}
{{- end }}
{{- end }}

{{/* Egress to the cluster DNS, UDP and TCP 53. */}}
{{- define "wallet-service.networkPolicy.dnsEgress" -}}
# DNS
- to:
    {{- toYaml .Values.networkPolicy.dns.to | nindent 4 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end }}

{{/* Egress to one dependency: (dict "name" "redis" "rule" $np.redis). */}}
{{- define "wallet-service.networkPolicy.peerEgress" -}}
# {{ .name }}
- to:
    {{- toYaml .rule.to | nindent 4 }}
  ports:
    {{- range .rule.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
{{- end }}

{{/* Egress of the API and worker pods. */}}
{{- define "wallet-service.networkPolicy.appEgress" -}}
{{- $np := .Values.networkPolicy }}
{{- include "wallet-service.networkPolicy.dnsEgress" . }}
{{ include "wallet-service.networkPolicy.peerEgress" (dict "name" "postgresql" "rule" $np.postgresql) }}
{{ include "wallet-service.networkPolicy.peerEgress" (dict "name" "redis" "rule" $np.redis) }}
{{- if .Values.tracing.otlpEndpoint }}
{{ include "wallet-service.networkPolicy.peerEgress" (dict "name" "OTLP collector" "rule" $np.otlpCollector) }}
{{- end }}
# webhook endpoints and the SMS provider: public addresses only
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
        except:
          {{- toYaml $np.webhooks.blockedCIDRs | nindent 10 }}
  ports:
    {{- range $np.webhooks.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
    {{- if and $np.webhooks.allowHttp (not (has "80" (toStrings $np.webhooks.ports))) }}
    - protocol: TCP
      port: 80
    {{- end }}
{{- with $np.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Label matchers of this release's series in alert expressions. */}}
{{- define "wallet-service.alertSelector" -}}
{{- if .Values.alerts.selector -}}
{{ .Values.alerts.selector }}
{{- else -}}
namespace="{{ .Release.Namespace }}",job=~"{{ include "wallet-service.fullname" . }}-(api|worker-metrics)"
{{- end }}
{{- end }}

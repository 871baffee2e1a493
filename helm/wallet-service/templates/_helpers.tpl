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
api/src/config.rs; any other WALLET_* variable makes it refuse to start.
*/}}
{{- define "wallet-service.secretKeys.required" -}}
WALLET_DATABASE_URL WALLET_REDIS_URL WALLET_JWT_SECRET WALLET_SECRET_KEY
{{- end }}
{{- define "wallet-service.secretKeys.optional" -}}
WALLET_SMS_PROVIDER_TOKEN WALLET_JWT_PREVIOUS_SECRETS
{{- end }}
{{/* Set by the chart per component: API WALLET_LISTEN_ADDR=0.0.0.0:8080 and
WALLET_RUN_WORKERS=false; worker WALLET_METRICS_LISTEN_ADDR=0.0.0.0:9091. */}}
{{- define "wallet-service.chartManagedKeys" -}}
WALLET_LISTEN_ADDR WALLET_RUN_WORKERS WALLET_METRICS_LISTEN_ADDR
{{- end }}
{{- define "wallet-service.configKeys" -}}
WALLET_DATA_DIR WALLET_JWT_KID WALLET_LOG_FORMAT WALLET_MAX_BODY_BYTES WALLET_KEY_CACHE_TTL_SECS WALLET_BCRYPT_COST WALLET_REDIS_TIMEOUT_MS WALLET_DB_ACQUIRE_TIMEOUT_MS WALLET_DB_MAX_CONNECTIONS WALLET_REDIS_PREFIX WALLET_JOB_MAX_ATTEMPTS WALLET_JOB_BACKOFF_BASE_MS WALLET_JOB_BACKOFF_MAX_MS WALLET_JOB_TIMEOUT_MS WALLET_JOB_CONCURRENCY WALLET_OUTBOX_POLL_MS WALLET_SMS_PROVIDER_URL WALLET_SMS_PROVIDER_TIMEOUT_MS
{{- end }}

{{/*
Checks one config map: (dict "values" $map "where" "config"). Fails the render on a
secret, a chart-managed or an unknown key.
*/}}
{{- define "wallet-service.validateConfig" -}}
{{- $secrets := concat (splitList " " (include "wallet-service.secretKeys.required" .)) (splitList " " (include "wallet-service.secretKeys.optional" .)) }}
{{- $managed := splitList " " (include "wallet-service.chartManagedKeys" .) }}
{{- $known := splitList " " (include "wallet-service.configKeys" .) }}
{{- range $k, $v := .values }}
{{- if has $k $secrets }}
{{- fail (printf "%s.%s: %s is a secret; put it in the Secret named by existingSecret, never in values" $.where $k $k) }}
{{- else if has $k $managed }}
{{- fail (printf "%s.%s: %s is set by the chart (API: WALLET_LISTEN_ADDR=0.0.0.0:8080, WALLET_RUN_WORKERS=false; worker: WALLET_METRICS_LISTEN_ADDR=0.0.0.0:9091); remove it" $.where $k $k) }}
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

{{/* Secret-backed env entries, shared by every container. */}}
{{- define "wallet-service.secretEnv" -}}
{{- $secret := include "wallet-service.secretName" . }}
{{- range splitList " " (include "wallet-service.secretKeys.required" .) }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
{{- end }}
{{- range splitList " " (include "wallet-service.secretKeys.optional" .) }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
      optional: true
{{- end }}
{{- end }}

{{/* extraEnv, with WALLET_* names refused. */}}
{{- define "wallet-service.extraEnv" -}}
{{- range .Values.extraEnv }}
{{- if hasPrefix "WALLET_" (upper .name) }}
{{- fail (printf "extraEnv.%s: WALLET_* variables go in `config` (or in existingSecret), where they are checked" .name) }}
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

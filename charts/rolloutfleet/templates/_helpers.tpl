{{/* Names and labels shared by every template. */}}

{{- define "rolloutfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rolloutfleet.fullname" -}}
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

{{- define "rolloutfleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "rolloutfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rolloutfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rolloutfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rolloutfleet.operator.selectorLabels" -}}
{{ include "rolloutfleet.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "rolloutfleet.redis.selectorLabels" -}}
{{ include "rolloutfleet.selectorLabels" . }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "rolloutfleet.redis.replicaSelectorLabels" -}}
{{ include "rolloutfleet.selectorLabels" . }}
app.kubernetes.io/component: redis-replica
{{- end -}}

{{/* The URLs of the chart Redis's read replicas (redis.readReplicas), comma-separated; empty for none. */}}
{{- define "rolloutfleet.redis.replicaUrls" -}}
{{- if and .Values.redis.enabled (gt (int .Values.redis.readReplicas) 0) -}}
{{- $fullname := include "rolloutfleet.redis.fullname" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.redis.readReplicas) -}}
{{- $urls = append $urls (printf "%s://%s-replica-%d.%s-replica.%s.svc:6379/0" (ternary "rediss" "redis" $.Values.redis.tls.enabled) $fullname $i $fullname $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}
{{- end -}}

{{- define "rolloutfleet.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "rolloutfleet.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rolloutfleet.operator.image" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) -}}
{{- end -}}

{{- define "rolloutfleet.worker.image" -}}
{{- printf "%s:%s" .Values.worker.image.repository (default .Chart.AppVersion .Values.worker.image.tag) -}}
{{- end -}}

{{- define "rolloutfleet.worker.slimImage" -}}
{{- if .Values.worker.slimImage.enabled -}}
{{- printf "%s:%s" .Values.worker.slimImage.repository (default (printf "%s-slim" .Chart.AppVersion) .Values.worker.slimImage.tag) -}}
{{- else -}}
none
{{- end -}}
{{- end -}}

{{- define "rolloutfleet.redis.image" -}}
{{- printf "%s:%s" .Values.redis.image.repository (default .Chart.AppVersion .Values.redis.image.tag) -}}
{{- end -}}

{{- define "rolloutfleet.redis.fullname" -}}
{{- printf "%s-redis" (include "rolloutfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rolloutfleet.redis.secretName" -}}
{{- default (include "rolloutfleet.redis.fullname" .) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{/* The Redis URL jobs and learners use: the bundled Redis, or externalUrl. */}}
{{- define "rolloutfleet.redis.url" -}}
{{- if .Values.redis.enabled -}}
{{- printf "%s://%s.%s.svc:6379/0" (ternary "rediss" "redis" .Values.redis.tls.enabled) (include "rolloutfleet.redis.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- .Values.redis.externalUrl -}}
{{- end -}}
{{- end -}}

{{/* The Secret whose key ca.crt is the CA clients verify Redis with; empty for none. */}}
{{- define "rolloutfleet.redis.caSecretName" -}}
{{- if and .Values.redis.enabled .Values.redis.tls.enabled -}}
{{- if .Values.redis.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "rolloutfleet.redis.fullname" .) -}}
{{- else -}}
{{- printf "%s-ca" (include "rolloutfleet.redis.fullname" .) -}}
{{- end -}}
{{- else if not .Values.redis.enabled -}}
{{- .Values.redis.tls.existingCASecret -}}
{{- end -}}
{{- end -}}

{{/* The pod security context every pod of the chart runs with. */}}
{{- define "rolloutfleet.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Labels the operator puts on every worker pod (rolloutfleet_operator.pods.WORKER_LABELS). */}}
{{- define "rolloutfleet.workerSelectorLabels" -}}
app.kubernetes.io/name: rolloutfleet
app.kubernetes.io/component: worker
app.kubernetes.io/managed-by: rolloutfleet-operator
{{- end -}}

{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "scrapeq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name prefix of every object, truncated to 63 characters. */}}
{{- define "scrapeq.fullname" -}}
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

{{/* A name for one component: <fullname>-<suffix>, still at most 63 characters. */}}
{{- define "scrapeq.componentName" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "scrapeq.fullname" $root | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" -}}
{{- end -}}

{{- define "scrapeq.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
app.kubernetes.io/name: {{ include "scrapeq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "scrapeq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "scrapeq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "scrapeq.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}

{{/* The Secret and key that hold DATABASE_URL. */}}
{{- define "scrapeq.databaseSecretName" -}}
{{- if .Values.database.existingSecret.name -}}
{{- .Values.database.existingSecret.name -}}
{{- else -}}
{{- include "scrapeq.componentName" (list . "database") -}}
{{- end -}}
{{- end -}}

{{- define "scrapeq.databaseSecretKey" -}}
{{- if .Values.database.existingSecret.name -}}
{{- .Values.database.existingSecret.key -}}
{{- else -}}
DATABASE_URL
{{- end -}}
{{- end -}}

{{- define "scrapeq.bundledDatabase" -}}
{{- if and .Values.database.bundled.enabled (not .Values.database.existingSecret.name) -}}true{{- end -}}
{{- end -}}

{{/* Pod and container security defaults: non-root, nothing to escalate to. */}}
{{- define "scrapeq.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "scrapeq.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

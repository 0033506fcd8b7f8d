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

{{/* An image reference: [registry/]repository then @digest (which wins) or :tag, the tag
     defaulting to the second argument (the chart's appVersion for scrapeq's own images). */}}
{{- define "scrapeq.image" -}}
{{- $image := index . 0 -}}
{{- $defaultTag := index . 1 -}}
{{- $name := $image.repository -}}
{{- with $image.registry }}{{ $name = printf "%s/%s" (trimSuffix "/" .) $name }}{{ end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $name $image.digest -}}
{{- else -}}
{{- $tag := default $defaultTag $image.tag -}}
{{- if not $tag }}{{ fail (printf "image %s: set image.tag or image.digest" $name) }}{{ end -}}
{{- printf "%s:%s" $name $tag -}}
{{- end -}}
{{- end -}}

{{- define "scrapeq.bundledDatabase" -}}
{{- if and .Values.database.bundled.enabled (not .Values.database.existingSecret.name) -}}true{{- end -}}
{{- end -}}

{{/* The Secret and key holding the bundled database's password: the user's Secret when
     database.bundled.passwordSecret.name is set, else the one the chart renders. */}}
{{- define "scrapeq.bundledPasswordSecretName" -}}
{{- default (include "scrapeq.componentName" (list . "database")) .Values.database.bundled.passwordSecret.name -}}
{{- end -}}

{{- define "scrapeq.bundledPasswordSecretKey" -}}
{{- if .Values.database.bundled.passwordSecret.name -}}
{{- .Values.database.bundled.passwordSecret.key -}}
{{- else -}}
POSTGRES_PASSWORD
{{- end -}}
{{- end -}}

{{/* The database environment of the operator and the workers. An external database comes as a
     DATABASE_URL from the user's Secret. The bundled one gets a URL without the password and
     PGPASSWORD from its Secret, which libpq (psycopg) reads: so the password can live in a
     Secret the user made, with no key to keep in sync. */}}
{{- define "scrapeq.databaseEnv" -}}
{{- if include "scrapeq.bundledDatabase" . -}}
{{- if .Values.database.pooler.enabled -}}
{{- fail "database.pooler.enabled needs an external database (database.existingSecret.name): the bundled database has no pooler" -}}
{{- end -}}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "scrapeq.bundledPasswordSecretName" . }}
      key: {{ include "scrapeq.bundledPasswordSecretKey" . }}
- name: DATABASE_URL
  value: {{ printf "postgresql://scrapeq@%s:5432/scrapeq" (include "scrapeq.componentName" (list . "database")) | quote }}
{{- else if .Values.database.existingSecret.name -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret.name }}
      key: {{ .Values.database.existingSecret.key }}
{{- if .Values.database.pooler.enabled }}
{{- if not .Values.database.pooler.listenSecret.name }}
{{- fail "database.pooler.enabled needs database.pooler.listenSecret.name: a Secret holding the URL of PostgreSQL itself, for the LISTEN sessions that cannot go through a pooler in transaction mode" }}
{{- end }}
- name: DATABASE_POOLED
  value: "true"
- name: DATABASE_LISTEN_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.pooler.listenSecret.name }}
      key: {{ .Values.database.pooler.listenSecret.key }}
{{- end }}
{{- else -}}
{{- fail "no database: set database.existingSecret.name to a Secret holding DATABASE_URL, or database.bundled.enabled=true" -}}
{{- end -}}
{{- end -}}

{{/* A pod securityContext: non-root and the runtime's seccomp profile always; uid, gid and
     fsGroup only when set, so platforms that assign them (OpenShift's restricted SCC picks a
     uid from the namespace's range) can leave them out with `null`. Argument: the values dict. */}}
{{- define "scrapeq.podSecurityContext" -}}
runAsNonRoot: true
{{- range $field := list "runAsUser" "runAsGroup" "fsGroup" }}
{{- if and (hasKey $ $field) (not (kindIs "invalid" (index $ $field))) }}
{{ $field }}: {{ index $ $field }}
{{- end }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "scrapeq.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Pod labels: the user's first, the selector labels last so they cannot be overridden.
     Arguments: list of (user labels dict, selector labels YAML). */}}
{{- define "scrapeq.podLabels" -}}
{{- $user := index . 0 -}}
{{- $selector := index . 1 | fromYaml -}}
{{- toYaml (merge $selector (deepCopy $user)) -}}
{{- end -}}

{{/* Scheduling fields of a pod spec, each only when set: priorityClassName, nodeSelector,
     tolerations, affinity, topologySpreadConstraints. A spread constraint without a
     labelSelector gets the pod's own selector labels. Arguments: list of (settings dict,
     selector labels YAML). */}}
{{- define "scrapeq.podScheduling" -}}
{{- $settings := index . 0 -}}
{{- $selector := index . 1 | fromYaml -}}
{{- with $settings.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- range $field := list "nodeSelector" "tolerations" "affinity" }}
{{- with index $settings $field }}
{{ $field }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- with $settings.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
  - {{- toYaml $constraint | nindent 4 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Where the operator and the workers read SCRAPEQ_SEALING_KEY (the key ring that seals
     ScrapeJob credentials into rows), as "secret-name/key", or "" when no key can be rendered.
     The chart's own Secret holds credentials.sealingKey.value, or a generated key that Helm
     keeps by reading the live Secret back (`lookup`). A render without the cluster
     (`helm template`, GitOps; recognised by finding no kube-system, as for the database
     password) cannot read it back, so it renders no key rather than a new one on every render:
     ScrapeJobs with credentials then wait with Ready=False NoSealingKey (docs/chart.md). */}}
{{- define "scrapeq.sealingKeySecret" -}}
{{- $key := .Values.credentials.sealingKey -}}
{{- $own := include "scrapeq.componentName" (list . "sealing-key") -}}
{{- if $key.existingSecret.name -}}
{{- printf "%s/%s" $key.existingSecret.name $key.existingSecret.key -}}
{{- else if or $key.value (lookup "v1" "Secret" .Release.Namespace $own) (lookup "v1" "Namespace" "" "kube-system") -}}
{{- printf "%s/SCRAPEQ_SEALING_KEY" $own -}}
{{- end -}}
{{- end -}}

{{- define "scrapeq.sealingKeyEnv" -}}
{{- $secret := include "scrapeq.sealingKeySecret" . -}}
{{- if $secret -}}
- name: SCRAPEQ_SEALING_KEY
  valueFrom:
    secretKeyRef:
      name: {{ dir $secret }}
      key: {{ base $secret }}
      # Without it the pods still run: ScrapeJobs with credentials wait (NoSealingKey).
      optional: true
{{- end -}}
{{- end -}}

{{/* Names and labels. */}}
{{- define "walrelay.name" -}}
{{- default "walrelay" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "walrelay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "walrelay.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "walrelay.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* walrelay's selector labels (standalone mode's pods; never the application's). */}}
{{- define "walrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "walrelay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "walrelay.labels" -}}
{{ include "walrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "walrelay.recoveryConfigMap" -}}
{{- default (printf "%s-recovery" (include "walrelay.fullname" .)) .Values.recoveryConfigMap -}}
{{- end -}}

{{/* Pod annotations: Prometheus' and the config's checksum (a changed config rolls the pods). */}}
{{- define "walrelay.podAnnotations" -}}
checksum/config: {{ .Values.config | sha256sum }}
{{- if .Values.prometheusAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.healthPort | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The walrelay container, the same in both modes. */}}
{{- define "walrelay.container" -}}
- name: walrelay
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run", "--config", "/etc/walrelay/walrelay.toml"]
  env:
    # The log format is the config's [log] format: no WALRELAY_LOG_FORMAT,
    # which would win over it.
    - name: WALRELAY_LOG
      value: {{ .Values.logFilter | quote }}
    # Unset unless a recovery step asks for --accept-slot-position.
    - name: WALRELAY_ACCEPT_SLOT_POSITION
      valueFrom:
        configMapKeyRef:
          name: {{ include "walrelay.recoveryConfigMap" . }}
          key: accept_slot_position
          optional: true
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: walrelay-http
      containerPort: {{ .Values.healthPort }}
  volumeMounts:
    - name: walrelay-config
      mountPath: /etc/walrelay
      readOnly: true
    - name: walrelay-secrets
      mountPath: {{ .Values.secretMountPath }}
      readOnly: true
    - name: walrelay-tmp
      mountPath: /tmp
  {{- with .Values.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if and (eq .Values.mode "standalone") .Values.standalone.readinessProbe }}
  readinessProbe:
    {{- toYaml .Values.standalone.readinessProbe | nindent 4 }}
  {{- end }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
{{- end -}}

{{/* walrelay's volumes. The Secret's files are root:<fsGroup> 0440, read
     through the pod's fsGroup, mounted in walrelay's container only. */}}
{{- define "walrelay.volumes" -}}
- name: walrelay-config
  configMap:
    name: {{ include "walrelay.fullname" . }}
- name: walrelay-secrets
  secret:
    secretName: {{ required "existingSecret: the name of the Secret with pg_password (kubectl create secret generic NAME --from-literal=pg_password=...)" .Values.existingSecret }}
    defaultMode: 0440
- name: walrelay-tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{- define "inferwatch.name" -}}
{{- printf "%s-injector" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "inferwatch.labels" -}}
app.kubernetes.io/name: inferwatch-injector
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "inferwatch.selector" -}}
app.kubernetes.io/name: inferwatch-injector
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "inferwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "inferwatch.sidecarImage" -}}
{{- $repo := default .Values.image.repository .Values.sidecar.image.repository -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.sidecar.image.tag -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{- define "inferwatch.secret" -}}
{{- printf "%s-tls" (include "inferwatch.name" .) -}}
{{- end -}}

{{- define "inferwatch.excluded" -}}
{{- $ns := list .Release.Namespace -}}
{{- range .Values.excludedNamespaces }}{{ if ne . $.Release.Namespace }}{{ $ns = append $ns . }}{{ end }}{{ end -}}
{{- toJson $ns -}}
{{- end -}}

{{- /* Labels of the monitoring objects (monitoring.yaml, baseline.yaml): the
chart's, and a user's extra ones, e.g. the release label a Prometheus selects
on; on a key both set, the chart's. */ -}}
{{- define "inferwatch.monitoringLabels" -}}
{{- $own := dict
  "app.kubernetes.io/name" "inferwatch"
  "app.kubernetes.io/component" "monitoring"
  "app.kubernetes.io/instance" .root.Release.Name
  "app.kubernetes.io/version" .root.Chart.AppVersion
  "app.kubernetes.io/managed-by" .root.Release.Service
  "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) -}}
{{- toYaml (merge $own (.extra | default dict)) -}}
{{- end -}}

{{- /* A duration of the values' form ([0-9]+(ms|s|m|h))+ in milliseconds. */ -}}
{{- define "inferwatch.ms" -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" . -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $ms = add $ms (mul (int64 $n) (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) (trimPrefix $n .))) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

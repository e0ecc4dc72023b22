{{- define "claimscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "claimscale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "claimscale.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "claimscale.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "claimscale.labels" -}}
app.kubernetes.io/name: {{ include "claimscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "claimscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "claimscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "claimscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "claimscale.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The generated RBAC (config/rbac/role.yaml, copied by `make manifests`): the rules of its ClusterRole, or of its namespaced Role. */}}
{{- define "claimscale.generatedRules" -}}
{{- $kind := .kind -}}
{{- $namespace := .namespace | default "claimscale-system" -}}
{{- range $document := splitList "\n---\n" (.root.Files.Get (.file | default "files/role.yaml")) -}}
{{- $object := fromYaml $document -}}
{{- if and (eq (get $object "kind") $kind) (or (eq $kind "ClusterRole") (eq (get (get $object "metadata") "namespace") $namespace)) -}}
{{- toYaml (get $object "rules") -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The gRPC expander is served with the server certificate, so never in plaintext. */}}
{{- define "claimscale.expander" -}}
{{- if and (eq .Values.mode "externalgrpc") .Values.externalgrpc.expander.enabled (not .Values.externalgrpc.insecure) -}}
true
{{- end -}}
{{- end -}}

{{- define "claimscale.grpcSecret" -}}
{{- if .Values.externalgrpc.existingServerSecret -}}
{{- .Values.externalgrpc.existingServerSecret -}}
{{- else -}}
{{- printf "%s-grpc-server" (include "claimscale.fullname" .) -}}
{{- end -}}
{{- end -}}

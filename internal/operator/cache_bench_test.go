package operator

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// runningPodJSON is a pod of make scale's Deployments as the API server
// returns it once it runs: the defaults its admission and the kubelet
// (kwok here) fill in included.
const runningPodJSON = `{
  "metadata": {
    "name": "scale-03-5d9c7b8f6d-%[1]05d", "generateName": "scale-03-5d9c7b8f6d-", "namespace": "default",
    "uid": "6f1c2a3b-8d4e-4f5a-9b6c-%012[1]d", "resourceVersion": "%[1]d", "creationTimestamp": "2026-11-27T10:00:00Z",
    "labels": {"app": "scale-03", "pod-template-hash": "5d9c7b8f6d"},
    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "scale-03-5d9c7b8f6d", "uid": "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", "controller": true, "blockOwnerDeletion": true}]
  },
  "spec": {
    "volumes": [{"name": "kube-api-access-%[1]05d", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}, {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}}],
    "containers": [{"name": "app", "image": "registry.example/scale:1", "resources": {"requests": {"cpu": "800m", "memory": "1Gi"}}, "volumeMounts": [{"name": "kube-api-access-%[1]05d", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}], "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
    "restartPolicy": "Always", "terminationGracePeriodSeconds": 0, "dnsPolicy": "ClusterFirst",
    "serviceAccountName": "default", "serviceAccount": "default", "nodeName": "pool-a-%[2]04d",
    "securityContext": {}, "schedulerName": "default-scheduler",
    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
    "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
  },
  "status": {
    "phase": "Running",
    "conditions": [
      {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-27T10:00:05Z"},
      {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-27T10:00:05Z"},
      {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-27T10:00:05Z"},
      {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-27T10:00:05Z"},
      {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-27T10:00:04Z"}
    ],
    "hostIP": "10.0.3.%[3]d", "hostIPs": [{"ip": "10.0.3.%[3]d"}], "podIP": "10.244.%[3]d.%[3]d", "podIPs": [{"ip": "10.244.%[3]d.%[3]d"}],
    "startTime": "2026-11-27T10:00:05Z",
    "containerStatuses": [{"name": "app", "state": {"running": {"startedAt": "2026-11-27T10:00:05Z"}}, "lastState": {}, "ready": true, "restartCount": 0, "image": "registry.example/scale:1", "imageID": "", "started": true}],
    "qosClass": "Burstable"
  }
}`

// BenchmarkCachedPodsHeld reports what the informer holds for each of
// 10,000 running pods once transformed (retained-B/pod): the bulk of the
// controller's memory at scale. Each iteration decodes them afresh, as a
// watch does.
func BenchmarkCachedPodsHeld(b *testing.B) {
	const count = 10_000
	raw := make([][]byte, count)
	for i := range raw {
		raw[i] = fmt.Appendf(nil, runningPodJSON, i, i/10, i%250)
	}
	for _, transform := range []struct {
		name string
		fn   func(any) (any, error)
	}{{"decoded", func(in any) (any, error) { return in, nil }}, {"stripped", stripPod}, {"cached", (&sharedParts{}).transform}} {
		b.Run(transform.name, func(b *testing.B) {
			var held float64
			for b.Loop() {
				before := heapInUse()
				pods := make([]*corev1.Pod, count)
				for i := range raw {
					pod := &corev1.Pod{}
					if err := json.Unmarshal(raw[i], pod); err != nil {
						b.Fatal(err)
					}
					out, err := transform.fn(pod)
					if err != nil {
						b.Fatal(err)
					}
					pods[i] = out.(*corev1.Pod)
				}
				held = float64(heapInUse()-before) / count
				runtime.KeepAlive(pods)
			}
			b.ReportMetric(held, "retained-B/pod")
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}

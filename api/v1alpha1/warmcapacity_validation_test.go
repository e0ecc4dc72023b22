package v1alpha1_test

import (
	"context"
	"testing"
)

// warmCapacityCases are headroom and capacity schedules the API refuses.
func warmCapacityCases() []rejection {
	pool := func(spec string) string { return poolNamed("invalid", oneShape+spec) }
	entry := func(fields string) string { return pool("  capacitySchedules: [{" + fields + "}]\n") }
	return []rejection{
		{"headroom with neither resources nor pods", pool("  headroom: {}\n"), "headroom: set exactly one of resources (cpu, memory), pods or external"},
		{"headroom with both resources and pods", pool("  headroom: {cpu: \"4\", pods: {count: 2, cpu: \"1\"}}\n"), "headroom: set exactly one of resources (cpu, memory), pods or external"},
		{"zero headroom cpu", pool("  headroom: {cpu: \"0\"}\n"), "headroom.cpu must be greater than zero"},
		{"negative headroom memory", pool("  headroom: {memory: -1Gi}\n"), "headroom.memory must be greater than zero"},
		{"headroom cpu beyond any pool", pool("  headroom: {cpu: \"20000\"}\n"), "headroom.cpu must be at most 10000"},
		{"headroom of no pods", pool("  headroom: {pods: {count: 0, cpu: \"1\"}}\n"), "should be greater than or equal to 1"},
		{"headroom of too many pods", pool("  headroom: {pods: {count: 1001, cpu: \"1\"}}\n"), "should be less than or equal to 1000"},
		{"headroom pods of zero cpu", pool("  headroom: {pods: {count: 2, cpu: \"0\"}}\n"), "headroom.pods.cpu must be greater than zero"},
		{"headroom pods without cpu", pool("  headroom: {pods: {count: 2, memory: 1Gi}}\n"), "spec.headroom.pods.cpu: Required value"},
		{"headroom both external and pods", pool("  headroom: {pods: {count: 2, cpu: \"1\"}, external: {address: \"scaler:9090\", targetPerNode: \"10\", max: 3}}\n"), "headroom: set exactly one of resources (cpu, memory), pods or external"},
		{"external headroom without a target", pool("  headroom: {external: {address: \"scaler:9090\", max: 3}}\n"), "headroom.external: set exactly one of targetPerNode or targetPerPod"},
		{"external headroom with both targets", pool("  headroom: {external: {address: \"scaler:9090\", targetPerNode: \"10\", targetPerPod: \"1\", pod: {cpu: \"1\"}, max: 3}}\n"), "headroom.external: set exactly one of targetPerNode or targetPerPod"},
		{"external headroom per pod without a pod size", pool("  headroom: {external: {address: \"scaler:9090\", targetPerPod: \"1\", max: 3}}\n"), "headroom.external: targetPerPod needs pod"},
		{"external headroom with a zero target", pool("  headroom: {external: {address: \"scaler:9090\", targetPerNode: \"0\", max: 3}}\n"), "headroom.external.targetPerNode must be greater than zero"},
		{"external headroom with min above max", pool("  headroom: {external: {address: \"scaler:9090\", targetPerNode: \"10\", min: 4, max: 3}}\n"), "headroom.external: min must not exceed max"},
		{"external headroom without a port", pool("  headroom: {external: {address: scaler, targetPerNode: \"10\", max: 3}}\n"), "spec.headroom.external.address"},
		{"external headroom in a schedule", entry("schedule: \"@hourly\", duration: 1h, headroom: {external: {address: \"scaler:9090\", targetPerNode: \"10\", max: 3}}"), "a capacity schedule's headroom may not be external"},
		{"capacity schedule that sets nothing", entry("schedule: \"@daily\", duration: 1h"), "a capacity schedule sets minNodes, headroom or both"},
		{"capacity schedule without duration", entry("schedule: \"@daily\", minNodes: 2"), "spec.capacitySchedules[0].duration: Required value"},
		{"capacity schedule of bad syntax", entry("schedule: \"at seven\", duration: 1h, minNodes: 2"), "schedule must be a descriptor"},
		{"capacity schedule with a time zone", entry("schedule: \"CRON_TZ=Europe/Zurich 0 7 * * *\", duration: 1h, minNodes: 2"), "schedule must be a descriptor"},
		{"capacity schedule that never fires", entry("schedule: \"0 7 30 2 *\", duration: 1h, minNodes: 2"), "schedule never fires: February has no day 30 or 31"},
		{"capacity schedule shorter than a minute", entry("schedule: \"@hourly\", duration: 30s, minNodes: 2"), "capacity schedule duration must be at least 1m"},
		{"capacity schedule with negative minNodes", entry("schedule: \"@hourly\", duration: 1h, minNodes: -1"), "should be greater than or equal to 0"},
		{"capacity schedule with bad headroom", entry("schedule: \"@hourly\", duration: 1h, headroom: {cpu: \"0\"}"), "headroom.cpu must be greater than zero"},
		{"capacity schedule above the node limit", pool("  limits: {nodes: 3}\n  capacitySchedules: [{schedule: \"@hourly\", duration: 1h, minNodes: 5}]\n"), "capacitySchedules: minNodes must not exceed limits.nodes"},
	}
}

func TestWarmCapacityIsAccepted(t *testing.T) {
	manifest := poolNamed("warm", oneShape+`  minNodes: 1
  limits: {nodes: 10}
  headroom: {cpu: "8", memory: 32Gi}
  capacitySchedules:
  - {schedule: "0 7 * * 1-5", duration: 12h, minNodes: 5, headroom: {pods: {count: 4, cpu: "1", memory: 2Gi}}}
  - {schedule: "@daily", duration: 1h, headroom: {memory: 8Gi}}
`)
	external := poolNamed("external", oneShape+`  headroom:
    external:
      address: keda-scaler.ci.svc:9090
      metadata: {queue: jobs}
      targetPerPod: "5"
      pod: {cpu: "1", memory: 2Gi}
      min: 1
      max: 20
      gracePeriod: 2m
      tls: {serverName: keda-scaler.ci.svc}
`)
	ctx := context.Background()
	for _, manifest := range []string{manifest, external} {
		object := mustDecode(t, manifest)
		if err := env.Client.Create(ctx, object); err != nil {
			t.Fatalf("rejected: %v", err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, object) })
	}
}

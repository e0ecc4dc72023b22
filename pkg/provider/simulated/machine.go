package simulated

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// LabelMachine marks a ConfigMap as a simulated machine.
const LabelMachine = "claimscale.io/simulated-machine"

// Region is the region label of every simulated machine.
const Region = "simulated"

// Defaults of the registered Node where the pool says nothing.
const (
	defaultMaxPods = 110
	// ephemeralStorage every simulated machine has, so pods requesting some
	// can be placed.
	ephemeralStorage = "100Gi"
)

// Keys of a machine ConfigMap's data.
const (
	dataShape           = "shape"
	dataCPU             = "cpu"
	dataMemory          = "memory"
	dataZone            = "zone"
	dataCreatedAt       = "createdAt"
	dataBootAt          = "bootAt"
	dataNeverRegister   = "neverRegister"
	dataRegisteredAt    = "registeredAt"
	dataNodeLabels      = "nodeLabels"
	dataNodeTaints      = "nodeTaints"
	dataNodeCapacity    = "nodeCapacity"
	dataNodeAllocatable = "nodeAllocatable"
	dataResourceSlices  = "resourceSlices"
	// dataUserData is "secret" when the machine has user data, kept in the
	// Secret of the machine's name: its kubelet then joins with the token
	// in it.
	dataUserData = "userData"
	// dataSuspendedAt is when the machine was stopped; present while it is.
	dataSuspendedAt = "suspendedAt"
	// dataResumedAt is when a stopped machine was last started; its Node
	// registers again at bootAt, which the start moved.
	dataResumedAt = "resumedAt"
)

// machine is a simulated machine and the Node it registers.
type machine struct {
	name string
	// tags are the exact ownership tags (cluster, pool, claim).
	tags          map[string]string
	shape         string
	cpu, memory   resource.Quantity
	zone          string
	createdAt     time.Time
	bootAt        time.Time
	neverRegister bool
	// registeredAt is zero until the registrar made the Node.
	registeredAt time.Time
	deleting     bool
	// userData: the machine boots with user data (in its Secret) and joins
	// with the token in it.
	userData bool
	// suspendedAt is zero unless the machine is stopped; resumedAt is
	// when it was last started again.
	suspendedAt, resumedAt time.Time

	nodeLabels      map[string]string
	nodeTaints      []corev1.Taint
	nodeCapacity    corev1.ResourceList
	nodeAllocatable corev1.ResourceList
	// slices are the devices the machine's DRA driver publishes once its
	// Node registered: its shape's template ResourceSlices.
	slices []v1alpha1.TemplateResourceSlice
}

// machineParams are what Create decides about a new machine besides its
// claim.
type machineParams struct {
	cluster       string
	zone          string
	kubelet       v1alpha1.KubeletConfiguration
	createdAt     time.Time
	bootAt        time.Time
	neverRegister bool
	userData      bool
	slices        []v1alpha1.TemplateResourceSlice
}

func newMachine(claim *v1alpha1.NodeClaim, p machineParams) *machine {
	shape := claim.Spec.Shape
	capacity, allocatable := nodeResources(shape.CPU, shape.Memory, p.kubelet)
	// The devices of the shape, as a device plugin on the machine would
	// advertise them: whole, none reserved.
	for name, count := range shape.ExtendedResources {
		capacity[name] = count.DeepCopy()
		allocatable[name] = count.DeepCopy()
	}
	return &machine{
		name:   claim.Name,
		tags:   provider.Tags(p.cluster, claim),
		shape:  shape.Name,
		cpu:    shape.CPU.DeepCopy(),
		memory: shape.Memory.DeepCopy(),
		zone:   p.zone,
		// As the record stores them: in UTC, without a monotonic reading.
		createdAt:       p.createdAt.UTC().Round(0),
		bootAt:          p.bootAt.UTC().Round(0),
		neverRegister:   p.neverRegister,
		userData:        p.userData,
		nodeLabels:      nodeLabels(claim, p.zone),
		nodeTaints:      nodeTaints(claim),
		nodeCapacity:    capacity,
		nodeAllocatable: allocatable,
		slices:          p.slices,
	}
}

// nodeLabels are the claim's own labels (the pool template's, when the
// provisioner put them there) and the labels a kubelet and a cloud
// controller manager would set.
func nodeLabels(claim *v1alpha1.NodeClaim, zone string) map[string]string {
	labels := maps.Clone(claim.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelNodePool] = labelValue(claim.Spec.NodePoolRef.Name)
	labels[v1alpha1.LabelNodeClaim] = labelValue(claim.Name)
	labels[corev1.LabelHostname] = labelValue(claim.Name)
	labels[corev1.LabelInstanceTypeStable] = labelValue(claim.Spec.Shape.Name)
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelArchStable] = "amd64"
	labels[corev1.LabelTopologyRegion] = Region
	if gpu := v1alpha1.GPUType(claim.Spec.Shape.Name, claim.Spec.Shape.ExtendedResources); gpu != "" {
		labels[v1alpha1.LabelGPU] = labelValue(gpu)
	}
	if zone != "" {
		labels[corev1.LabelTopologyZone] = labelValue(zone)
	}
	// kwok's own examples mark the nodes it runs so; some tooling selects
	// them by it.
	labels["type"] = "kwok"
	return labels
}

// nodeTaints are the claim's taints and startup taints, once each, and
// claimscale's unregistered taint, as a kubelet started from claimscale's
// user data registers.
func nodeTaints(claim *v1alpha1.NodeClaim) []corev1.Taint {
	var taints []corev1.Taint
	unregistered := corev1.Taint{Key: v1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule}
	for _, t := range slices.Concat(claim.Spec.Taints, claim.Spec.StartupTaints, []corev1.Taint{unregistered}) {
		if !slices.ContainsFunc(taints, func(have corev1.Taint) bool { return have.MatchTaint(&t) }) {
			taints = append(taints, t)
		}
	}
	return taints
}

// nodeResources returns what a kubelet with the pool's settings would report
// for a machine of cpu and memory.
func nodeResources(cpu, memory resource.Quantity, kubelet v1alpha1.KubeletConfiguration) (capacity, allocatable corev1.ResourceList) {
	maxPods := int64(defaultMaxPods)
	if kubelet.MaxPods != nil {
		maxPods = int64(*kubelet.MaxPods)
	}
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:              cpu.DeepCopy(),
		corev1.ResourceMemory:           memory.DeepCopy(),
		corev1.ResourcePods:             *resource.NewQuantity(maxPods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse(ephemeralStorage),
	}
	allocatable = capacity.DeepCopy()
	reserve := func(name corev1.ResourceName, q resource.Quantity) {
		if q.Sign() <= 0 {
			return // a negative reservation would add to capacity
		}
		left := allocatable[name]
		left.Sub(q)
		if left.Sign() < 0 {
			left = *resource.NewQuantity(0, left.Format)
		}
		allocatable[name] = left
	}
	for _, reserved := range []corev1.ResourceList{kubelet.KubeReserved, kubelet.SystemReserved} {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			if q, ok := reserved[name]; ok {
				reserve(name, q)
			}
		}
	}
	for signal, name := range map[string]corev1.ResourceName{
		"memory.available": corev1.ResourceMemory,
		"nodefs.available": corev1.ResourceEphemeralStorage,
	} {
		if threshold, ok := kubelet.EvictionHard[signal]; ok {
			if q, ok := thresholdQuantity(string(threshold), capacity[name]); ok {
				reserve(name, q)
			}
		}
	}
	return capacity, allocatable
}

// thresholdQuantity reads an eviction threshold, a quantity or a percentage
// of capacity, never below zero nor above capacity. One that does not
// parse, or is negative or above 100%, reserves nothing (the API refuses
// those; a kubelet would not start with them).
func thresholdQuantity(threshold string, capacity resource.Quantity) (resource.Quantity, bool) {
	if percent, ok := strings.CutSuffix(threshold, "%"); ok {
		p, err := strconv.ParseFloat(percent, 64)
		if err != nil || !(p >= 0 && p <= 100) { // NaN fails both
			return resource.Quantity{}, false
		}
		whole := max(capacity.Value(), 0)
		part := float64(whole) * p / 100
		if part >= float64(whole) {
			// Also where float64 rounds a large capacity up past every
			// int64.
			return *resource.NewQuantity(whole, capacity.Format), true
		}
		return *resource.NewQuantity(int64(part), capacity.Format), true
	}
	if !thresholdSyntax.MatchString(threshold) {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(threshold)
	if err != nil {
		return resource.Quantity{}, false
	}
	return q, true
}

// thresholdSyntax is the quantity form the API admits for an eviction
// threshold (v1alpha1.EvictionThreshold): no sign, no exponent, whose
// arithmetic can take seconds (1e33333336).
var thresholdSyntax = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?([KMGTPE]i?)?$`)

// chooseZone picks the first of the provider's zones that the claim's zone
// requirements admit, else the first zone. With no zones configured, a
// claim that asks for zones gets the first it names: simulated
// infrastructure is wherever it is asked to be.
func chooseZone(zones []string, requirements []corev1.NodeSelectorRequirement) string {
	var onZone []corev1.NodeSelectorRequirement
	for _, r := range requirements {
		if r.Key == corev1.LabelTopologyZone {
			onZone = append(onZone, r)
		}
	}
	if len(zones) == 0 {
		for _, r := range onZone {
			if r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 {
				return r.Values[0]
			}
		}
		return ""
	}
	for _, zone := range zones {
		if zoneAdmitted(zone, onZone) {
			return zone
		}
	}
	return zones[0]
}

func zoneAdmitted(zone string, requirements []corev1.NodeSelectorRequirement) bool {
	for _, r := range requirements {
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			if !slices.Contains(r.Values, zone) {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if slices.Contains(r.Values, zone) {
				return false
			}
		case corev1.NodeSelectorOpDoesNotExist:
			return false
		}
	}
	return true
}

// labelValue returns v if it is a valid label value, else a stable hash of
// it, so a long or odd name can still be selected on. Where the exact value
// matters it is kept in an annotation.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256-" + hex.EncodeToString(sum[:])[:56]
}

// configMap encodes the machine as its record.
func (m *machine) configMap(namespace string) (*corev1.ConfigMap, error) {
	labels, err := json.Marshal(m.nodeLabels)
	if err != nil {
		return nil, err
	}
	taints, err := json.Marshal(m.nodeTaints)
	if err != nil {
		return nil, err
	}
	capacity, err := json.Marshal(m.nodeCapacity)
	if err != nil {
		return nil, err
	}
	allocatable, err := json.Marshal(m.nodeAllocatable)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.name,
			Namespace: namespace,
			Labels:    map[string]string{LabelMachine: "true"},
			// The exact tags; the labels may be hashes of them.
			Annotations: maps.Clone(m.tags),
		},
		Data: map[string]string{
			dataShape:           m.shape,
			dataCPU:             m.cpu.String(),
			dataMemory:          m.memory.String(),
			dataZone:            m.zone,
			dataCreatedAt:       m.createdAt.UTC().Format(time.RFC3339Nano),
			dataBootAt:          m.bootAt.UTC().Format(time.RFC3339Nano),
			dataNeverRegister:   strconv.FormatBool(m.neverRegister),
			dataNodeLabels:      string(labels),
			dataNodeTaints:      string(taints),
			dataNodeCapacity:    string(capacity),
			dataNodeAllocatable: string(allocatable),
		},
	}
	for k, v := range m.tags {
		cm.Labels[k] = labelValue(v)
	}
	if m.userData {
		cm.Data[dataUserData] = "secret"
	}
	if len(m.slices) > 0 {
		slices, err := json.Marshal(m.slices)
		if err != nil {
			return nil, err
		}
		cm.Data[dataResourceSlices] = string(slices)
	}
	for key, at := range map[string]time.Time{dataRegisteredAt: m.registeredAt, dataSuspendedAt: m.suspendedAt, dataResumedAt: m.resumedAt} {
		if !at.IsZero() {
			cm.Data[key] = at.UTC().Format(time.RFC3339Nano)
		}
	}
	return cm, nil
}

// machineFromConfigMap decodes a machine record.
func machineFromConfigMap(cm *corev1.ConfigMap) (*machine, error) {
	d := cm.Data
	m := &machine{
		name:          cm.Name,
		tags:          map[string]string{},
		shape:         d[dataShape],
		zone:          d[dataZone],
		neverRegister: d[dataNeverRegister] == "true",
		userData:      d[dataUserData] == "secret",
		deleting:      cm.DeletionTimestamp != nil,
	}
	for _, tag := range []string{v1alpha1.TagCluster, v1alpha1.TagNodePool, v1alpha1.TagNodeClaim} {
		m.tags[tag] = cm.Annotations[tag]
	}
	var err error
	fail := func(key string, err error) (*machine, error) {
		return nil, fmt.Errorf("simulated machine %s/%s: data %s: %w", cm.Namespace, cm.Name, key, err)
	}
	if m.cpu, err = resource.ParseQuantity(d[dataCPU]); err != nil {
		return fail(dataCPU, err)
	}
	if m.memory, err = resource.ParseQuantity(d[dataMemory]); err != nil {
		return fail(dataMemory, err)
	}
	if m.createdAt, err = time.Parse(time.RFC3339Nano, d[dataCreatedAt]); err != nil {
		return fail(dataCreatedAt, err)
	}
	if m.bootAt, err = time.Parse(time.RFC3339Nano, d[dataBootAt]); err != nil {
		return fail(dataBootAt, err)
	}
	for key, into := range map[string]*time.Time{dataRegisteredAt: &m.registeredAt, dataSuspendedAt: &m.suspendedAt, dataResumedAt: &m.resumedAt} {
		if v, ok := d[key]; ok {
			if *into, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return fail(key, err)
			}
		}
	}
	for key, into := range map[string]any{
		dataNodeLabels:      &m.nodeLabels,
		dataNodeTaints:      &m.nodeTaints,
		dataNodeCapacity:    &m.nodeCapacity,
		dataNodeAllocatable: &m.nodeAllocatable,
	} {
		if err := json.Unmarshal([]byte(d[key]), into); err != nil {
			return fail(key, err)
		}
	}
	if v, ok := d[dataResourceSlices]; ok {
		if err := json.Unmarshal([]byte(v), &m.slices); err != nil {
			return fail(dataResourceSlices, err)
		}
	}
	return m, nil
}

// suspended reports whether the machine is stopped.
func (m *machine) suspended() bool { return !m.suspendedAt.IsZero() }

// instance is the machine as the provider interface shows it.
func (m *machine) instance() *provider.Instance {
	state := provider.InstanceCreating
	switch {
	case m.deleting:
		state = provider.InstanceDeleting
	case m.suspended():
		state = provider.InstanceSuspended
	case !m.registeredAt.IsZero(), !m.resumedAt.IsZero():
		// A started machine runs; its kubelet registers at bootAt.
		state = provider.InstanceRunning
	}
	labels := map[string]string{corev1.LabelTopologyRegion: Region}
	if m.zone != "" {
		labels[corev1.LabelTopologyZone] = m.zone
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    m.cpu.DeepCopy(),
		corev1.ResourceMemory: m.memory.DeepCopy(),
	}
	// The devices: extended resources, the only domain-prefixed names a
	// node's capacity has here.
	for name, count := range m.nodeCapacity {
		if strings.Contains(string(name), "/") {
			capacity[name] = count.DeepCopy()
		}
	}
	return &provider.Instance{
		ProviderID: ProviderID(m.name),
		Name:       m.name,
		Capacity:   capacity,
		Labels:     labels,
		Tags:       maps.Clone(m.tags),
		State:      state,
		CreatedAt:  m.createdAt,
	}
}

// AnnotationKwokNode makes kwok run a Node (value "fake"): it marks it
// Ready and runs the pods bound to it.
const AnnotationKwokNode = "kwok.x-k8s.io/node"

// node is the Node the machine registers.
func (m *machine) node() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   m.name,
			Labels: maps.Clone(m.nodeLabels),
			Annotations: map[string]string{
				AnnotationKwokNode: "fake",
				// What a kubelet sets: no caching of secrets and config maps.
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Spec: corev1.NodeSpec{
			ProviderID: ProviderID(m.name),
			Taints:     slices.Clone(m.nodeTaints),
		},
		Status: corev1.NodeStatus{
			Capacity:    m.nodeCapacity.DeepCopy(),
			Allocatable: m.nodeAllocatable.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux",
				Architecture:    "amd64",
			},
		},
	}
}

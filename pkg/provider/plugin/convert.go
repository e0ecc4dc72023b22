package plugin

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
)

var statesToWire = map[provider.InstanceState]pluginpb.InstanceState{
	provider.InstanceCreating:  pluginpb.InstanceState_INSTANCE_STATE_CREATING,
	provider.InstanceRunning:   pluginpb.InstanceState_INSTANCE_STATE_RUNNING,
	provider.InstanceStopping:  pluginpb.InstanceState_INSTANCE_STATE_STOPPING,
	provider.InstanceDeleting:  pluginpb.InstanceState_INSTANCE_STATE_DELETING,
	provider.InstanceSuspended: pluginpb.InstanceState_INSTANCE_STATE_SUSPENDED,
}

func instanceToWire(i *provider.Instance) *pluginpb.Instance {
	if i == nil {
		return nil
	}
	out := &pluginpb.Instance{
		ProviderId: i.ProviderID,
		Name:       i.Name,
		Capacity:   resourcesToWire(i.Capacity),
		Labels:     i.Labels,
		Tags:       i.Tags,
		State:      statesToWire[i.State],
	}
	if !i.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(i.CreatedAt)
	}
	return out
}

func instanceFromWire(i *pluginpb.Instance) (*provider.Instance, error) {
	if i == nil {
		return nil, fmt.Errorf("the plugin answered no instance")
	}
	if i.GetProviderId() == "" {
		return nil, fmt.Errorf("the plugin answered an instance without a provider_id")
	}
	capacity, err := resourcesFromWire(i.GetCapacity())
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", i.GetProviderId(), err)
	}
	out := &provider.Instance{
		ProviderID: i.GetProviderId(),
		Name:       i.GetName(),
		Capacity:   capacity,
		Labels:     i.GetLabels(),
		Tags:       i.GetTags(),
	}
	for state, wire := range statesToWire {
		if wire == i.GetState() {
			out.State = state
		}
	}
	if i.GetCreatedAt() != nil {
		out.CreatedAt = i.GetCreatedAt().AsTime()
	}
	return out, nil
}

func resourcesToWire(list corev1.ResourceList) *pluginpb.Resources {
	out := &pluginpb.Resources{}
	for name, quantity := range list {
		switch name {
		case corev1.ResourceCPU:
			out.Cpu = quantity.String()
		case corev1.ResourceMemory:
			out.Memory = quantity.String()
		default:
			if isExtendedResourceName(name) {
				if out.Extended == nil {
					out.Extended = map[string]string{}
				}
				out.Extended[string(name)] = quantity.String()
			}
		}
	}
	return out
}

func resourcesFromWire(r *pluginpb.Resources) (corev1.ResourceList, error) {
	list := corev1.ResourceList{}
	for name, value := range map[corev1.ResourceName]string{corev1.ResourceCPU: r.GetCpu(), corev1.ResourceMemory: r.GetMemory()} {
		if value == "" {
			continue
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s %q is not a quantity: %w", name, value, err)
		}
		list[name] = q
	}
	extended, err := extendedFromWire("", r.GetExtended())
	for name, q := range extended {
		list[name] = q
	}
	return list, err
}

// isExtendedResourceName is the API server's rule for an extended
// resource (k8s.io/kubernetes/pkg/apis/core/v1/helper, which a plugin's
// module should not have to import): a qualified name with a domain
// outside kubernetes.io, not a quota's requests. prefix.
func isExtendedResourceName(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) && len(validation.IsQualifiedName(s)) == 0
}

// extendedToWire is a shape's extended resources as the protocol's map.
func extendedToWire(list corev1.ResourceList) map[string]string {
	if len(list) == 0 {
		return nil
	}
	out := make(map[string]string, len(list))
	for name, quantity := range list {
		out[string(name)] = quantity.String()
	}
	return out
}

// extendedFromWire reads extended resources: domain-prefixed names, whole
// counts; field names the message they came in, for the error.
func extendedFromWire(field string, wire map[string]string) (corev1.ResourceList, error) {
	if len(wire) == 0 {
		return nil, nil
	}
	list := make(corev1.ResourceList, len(wire))
	for name, value := range wire {
		if !isExtendedResourceName(corev1.ResourceName(name)) {
			return nil, fmt.Errorf("%sextended resource %q is not an extended resource name", field, name)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%sextended resource %s %q is not a quantity: %w", field, name, value, err)
		}
		list[corev1.ResourceName(name)] = q
	}
	return list, nil
}

// createRequest is what Client sends for a claim.
func createRequest(cluster, nodeProvider string, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) *pluginpb.CreateRequest {
	req := &pluginpb.CreateRequest{
		Cluster:      cluster,
		ClaimName:    claim.Name,
		NodePool:     claim.Spec.NodePoolRef.Name,
		ShapeName:    claim.Spec.Shape.Name,
		Shape:        &pluginpb.Resources{Cpu: claim.Spec.Shape.CPU.String(), Memory: claim.Spec.Shape.Memory.String(), Extended: extendedToWire(claim.Spec.Shape.ExtendedResources)},
		Tags:         provider.Tags(cluster, claim),
		UserData:     opts.UserData,
		NodeProvider: nodeProvider,
	}
	for _, r := range claim.Spec.Requirements.NodeSelector {
		req.Requirements = append(req.Requirements, &pluginpb.Requirement{Key: r.Key, Operator: string(r.Operator), Values: r.Values})
		if r.Key == corev1.LabelTopologyZone && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
			req.Zone = r.Values[0]
		}
	}
	return req
}

// claimFromWire is the claim a Server hands its provider: what the
// request says of it, which is all a provider reads.
func claimFromWire(req *pluginpb.CreateRequest) (*v1alpha1.NodeClaim, error) {
	if req.GetClaimName() == "" || req.GetNodePool() == "" {
		return nil, fmt.Errorf("claim_name and node_pool are required")
	}
	cpu, err := resource.ParseQuantity(req.GetShape().GetCpu())
	if err != nil {
		return nil, fmt.Errorf("shape cpu %q is not a quantity: %w", req.GetShape().GetCpu(), err)
	}
	memory, err := resource.ParseQuantity(req.GetShape().GetMemory())
	if err != nil {
		return nil, fmt.Errorf("shape memory %q is not a quantity: %w", req.GetShape().GetMemory(), err)
	}
	extended, err := extendedFromWire("shape ", req.GetShape().GetExtended())
	if err != nil {
		return nil, err
	}
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: req.GetClaimName()},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: req.GetNodePool()},
			Shape:       v1alpha1.ClaimShape{Name: req.GetShapeName(), CPU: cpu, Memory: memory, ExtendedResources: extended},
		},
	}
	for _, r := range req.GetRequirements() {
		claim.Spec.Requirements.NodeSelector = append(claim.Spec.Requirements.NodeSelector, corev1.NodeSelectorRequirement{
			Key: r.GetKey(), Operator: corev1.NodeSelectorOperator(r.GetOperator()), Values: r.GetValues(),
		})
	}
	return claim, nil
}

func shapesRequest(cluster, nodeProvider string, pool *v1alpha1.NodePool) *pluginpb.ShapesRequest {
	req := &pluginpb.ShapesRequest{Cluster: cluster, NodePool: pool.Name, NodeProvider: nodeProvider}
	for _, s := range pool.Spec.Shapes.Fixed {
		req.Fixed = append(req.Fixed, &pluginpb.PoolShape{Name: s.Name, Cpu: quantityString(s.CPU), Memory: quantityString(s.Memory), Price: s.Price, ExtendedResources: extendedToWire(s.ExtendedResources)})
	}
	if f := pool.Spec.Shapes.Flexible; f != nil {
		req.Flexible = &pluginpb.FlexibleRange{
			MinCpu: f.MinCPU.String(), MaxCpu: f.MaxCPU.String(), CpuStep: quantityString(f.CPUStep),
			MinMemory: f.MinMemory.String(), MaxMemory: f.MaxMemory.String(), MemoryStep: quantityString(f.MemoryStep),
			PricePerCpu: f.PricePerCPU, PricePerGib: f.PricePerGiB,
		}
	}
	return req
}

func quantityString(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	return q.String()
}

func optionalQuantity(field, value string) (*resource.Quantity, error) {
	if value == "" {
		return nil, nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a quantity: %w", field, value, err)
	}
	return &q, nil
}

func requiredQuantity(field, value string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return q, fmt.Errorf("%s %q is not a quantity: %w", field, value, err)
	}
	return q, nil
}

// poolFromWire is the pool a Server hands its provider's Shapes.
func poolFromWire(req *pluginpb.ShapesRequest) (*v1alpha1.NodePool, error) {
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: req.GetNodePool()}}
	for _, s := range req.GetFixed() {
		cpu, err := optionalQuantity("fixed shape "+s.GetName()+" cpu", s.GetCpu())
		if err != nil {
			return nil, err
		}
		memory, err := optionalQuantity("fixed shape "+s.GetName()+" memory", s.GetMemory())
		if err != nil {
			return nil, err
		}
		extended, err := extendedFromWire("fixed shape "+s.GetName()+" ", s.GetExtendedResources())
		if err != nil {
			return nil, err
		}
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed, v1alpha1.Shape{Name: s.GetName(), CPU: cpu, Memory: memory, Price: s.GetPrice(), ExtendedResources: extended})
	}
	if f := req.GetFlexible(); f != nil {
		var flexible v1alpha1.FlexibleShape
		var err error
		for _, q := range []struct {
			into  *resource.Quantity
			field string
			value string
		}{
			{&flexible.MinCPU, "flexible min_cpu", f.GetMinCpu()},
			{&flexible.MaxCPU, "flexible max_cpu", f.GetMaxCpu()},
			{&flexible.MinMemory, "flexible min_memory", f.GetMinMemory()},
			{&flexible.MaxMemory, "flexible max_memory", f.GetMaxMemory()},
		} {
			if *q.into, err = requiredQuantity(q.field, q.value); err != nil {
				return nil, err
			}
		}
		if flexible.CPUStep, err = optionalQuantity("flexible cpu_step", f.GetCpuStep()); err != nil {
			return nil, err
		}
		if flexible.MemoryStep, err = optionalQuantity("flexible memory_step", f.GetMemoryStep()); err != nil {
			return nil, err
		}
		flexible.PricePerCPU, flexible.PricePerGiB = f.GetPricePerCpu(), f.GetPricePerGib()
		pool.Spec.Shapes.Flexible = &flexible
	}
	return pool, nil
}

func shapeToWire(s provider.Shape) *pluginpb.Shape {
	return &pluginpb.Shape{Name: s.Name, Capacity: resourcesToWire(s.Capacity), Price: s.Price}
}

func shapeFromWire(s *pluginpb.Shape) (provider.Shape, error) {
	capacity, err := resourcesFromWire(s.GetCapacity())
	if err != nil {
		return provider.Shape{}, fmt.Errorf("shape %s: %w", s.GetName(), err)
	}
	return provider.Shape{Name: s.GetName(), Capacity: capacity, Price: s.GetPrice()}, nil
}

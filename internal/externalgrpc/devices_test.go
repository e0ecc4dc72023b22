package externalgrpc

import (
	"context"
	"net"
	"testing"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
)

// A shape with GPUs is a node group whose template node advertises them
// and carries the GPU label with the shape's name; GetAvailableGPUTypes
// lists that name, and no type for shapes without GPUs.
func TestGPUShapesAreGPUNodeGroups(t *testing.T) {
	w := newWorld(t, "gpus")
	pool := w.pool("gpus-a", func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed, v1alpha1.Shape{
			Name: "g8", CPU: qty("8"), Memory: qty("32Gi"), Price: "2",
			ExtendedResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
		})
	})
	ca := newClient(t)

	response, err := ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: pool.Name + "/g8"})
	w.g.Expect(err).NotTo(HaveOccurred())
	node := &corev1.Node{}
	w.g.Expect(node.Unmarshal(response.GetNodeBytes())).To(Succeed())
	w.g.Expect(node.Status.Allocatable.Name("nvidia.com/gpu", resource.DecimalSI).Value()).To(BeEquivalentTo(2))
	w.g.Expect(node.Status.Capacity.Name("nvidia.com/gpu", resource.DecimalSI).Value()).To(BeEquivalentTo(2))
	w.g.Expect(node.Labels).To(HaveKeyWithValue(v1alpha1.LabelGPU, "g8"))

	plain, err := ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: pool.Name + "/c2"})
	w.g.Expect(err).NotTo(HaveOccurred())
	plainNode := &corev1.Node{}
	w.g.Expect(plainNode.Unmarshal(plain.GetNodeBytes())).To(Succeed())
	w.g.Expect(plainNode.Labels).NotTo(HaveKey(v1alpha1.LabelGPU))

	types, err := ca.GetAvailableGPUTypes(w.ctx, &protos.GetAvailableGPUTypesRequest{})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(types.GetGpuTypes()).To(HaveLen(1))
	w.g.Expect(types.GetGpuTypes()).To(HaveKey("g8"))
}

// Without --gpu-label, the label cluster-autoscaler is told is the one
// the nodes of GPU shapes carry.
func TestTheGPULabelDefaultsToClaimscales(t *testing.T) {
	g := NewWithT(t)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	server, err := New(Options{Listener: listener, Insecure: true}, Dependencies{Kube: cached, Providers: resolver, Logger: log.Log})
	g.Expect(err).NotTo(HaveOccurred())
	runServer(t, server)
	conn, err := dial(server.Addr().String(), insecure.NewCredentials())
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	label, err := protos.NewCloudProviderClient(conn).GPULabel(context.Background(), &protos.GPULabelRequest{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(label.GetLabel()).To(Equal(v1alpha1.LabelGPU))
}

package harness

import (
	"context"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// CreateSecret makes a Secret (a provider's credentials) in the
// controller's namespace, removed when the test ends.
func (s *Scenario) CreateSecret(name string, data map[string][]byte) {
	s.G.Expect(env.Client.Create(s.Ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ControllerNamespace},
		Data:       data,
	})).To(Succeed())
	s.T.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ControllerNamespace}})
	})
}

// NodeProviderReady is the scenario NodeProvider's Ready condition, its
// read error as the message when it cannot be read.
func (s *Scenario) NodeProviderReady() metav1.Condition {
	var np v1alpha1.NodeProvider
	if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &np); err != nil {
		return metav1.Condition{Message: err.Error()}
	}
	if c := meta.FindStatusCondition(np.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// CrashAfterCreate lets Create make the machine, then stops the controller
// (Crash) before it can record it.
type CrashAfterCreate struct {
	provider.Provider
	Crash func()
}

func (c *CrashAfterCreate) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	if _, err := c.Provider.Create(ctx, claim, opts); err != nil {
		return nil, err
	}
	c.Crash()
	<-ctx.Done()
	return nil, ctx.Err()
}

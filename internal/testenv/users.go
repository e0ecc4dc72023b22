package testenv

import (
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// UserConfig reaches the API server as a user who authenticates with a
// client certificate signed by the cluster's client CA (the one the API
// server publishes in kube-system/extension-apiserver-authentication), as
// a kubeconfig made by kubeadm does: the common name is the user, the
// organisations its groups.
func (e *Environment) UserConfig(name string, groups ...string) (*rest.Config, error) {
	user, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("issuing a client certificate for %s: %w", name, err)
	}
	return user.Config(), nil
}

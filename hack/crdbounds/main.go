// Command crdbounds gives every int-or-string property (resource quantities)
// of the generated CRDs a maxLength, and every resource list a
// maxProperties. controller-gen cannot put either on resource.Quantity, and
// without bounds the API server prices CEL rules over quantities as if each
// could be megabytes long and refuses them.
//
// Usage: go run ./hack/crdbounds FILE...
package main

import (
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const (
	quantityMaxLength   = 64
	resourceListMaxKeys = 32
)

func main() {
	for _, path := range os.Args[1:] {
		if err := bound(path); err != nil {
			fmt.Fprintf(os.Stderr, "crdbounds: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func bound(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	for i := range crd.Spec.Versions {
		if schema := crd.Spec.Versions[i].Schema; schema != nil && schema.OpenAPIV3Schema != nil {
			walk(schema.OpenAPIV3Schema)
		}
	}
	out, err := yaml.Marshal(&crd)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	// controller-gen's files start with a document marker; keep it.
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

func walk(schema *apiextensionsv1.JSONSchemaProps) {
	if schema.XIntOrString && schema.MaxLength == nil {
		schema.MaxLength = ptr(int64(quantityMaxLength))
	}
	if schema.Type == "object" && schema.AdditionalProperties != nil && schema.AdditionalProperties.Schema != nil {
		if schema.AdditionalProperties.Schema.XIntOrString && schema.MaxProperties == nil {
			schema.MaxProperties = ptr(int64(resourceListMaxKeys))
		}
		walk(schema.AdditionalProperties.Schema)
	}
	for name, property := range schema.Properties {
		walk(&property)
		schema.Properties[name] = property
	}
	if schema.Items != nil && schema.Items.Schema != nil {
		walk(schema.Items.Schema)
	}
}

func ptr[T any](v T) *T { return &v }

// Command crdbounds gives every int-or-string property (resource quantities)
// of the generated CRDs a maxLength and a pattern, every resource list a
// maxProperties,
// the key, value and effect of every taint (core/v1 Taint) and the values
// of every labels map the longest Kubernetes allows. controller-gen cannot put markers on types of
// other modules, and without bounds the API server prices CEL rules over
// these strings as if each could be megabytes long and refuses them.
//
// Usage: go run ./hack/crdbounds FILE...
package main

import (
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// quantityPattern is Kubernetes' quantity syntax with an exponent of at
// most two digits. resource.ParseQuantity takes any exponent, but comparing
// 1e33333336 with another quantity takes the API server (evaluating a CEL
// rule) and the controller tens of seconds; a failed pattern keeps the
// rules from running at all.
const quantityPattern = `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,2})?$`

const (
	quantityMaxLength   = 64
	resourceListMaxKeys = 32

	// A taint key is a qualified name: a DNS subdomain prefix (253), '/',
	// and a name (63). Its value is a label value (63). Its effect is one
	// of three words.
	taintKeyMaxLength    = 253 + 1 + 63
	taintValueMaxLength  = 63
	taintEffectMaxLength = 32
	labelValueMaxLength  = 63
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
	if schema.XIntOrString {
		// In place of controller-gen's, which takes exponents of any length.
		schema.Pattern = quantityPattern
	}
	if schema.Type == "object" && schema.AdditionalProperties != nil && schema.AdditionalProperties.Schema != nil {
		if schema.AdditionalProperties.Schema.XIntOrString && schema.MaxProperties == nil {
			schema.MaxProperties = ptr(int64(resourceListMaxKeys))
		}
		walk(schema.AdditionalProperties.Schema)
	}
	if isTaint(schema) {
		for name, maxLength := range map[string]int64{"key": taintKeyMaxLength, "value": taintValueMaxLength, "effect": taintEffectMaxLength} {
			property := schema.Properties[name]
			if property.MaxLength == nil {
				property.MaxLength = ptr(maxLength)
			}
			schema.Properties[name] = property
		}
	}
	for name, property := range schema.Properties {
		if name == "labels" && property.Type == "object" && property.AdditionalProperties != nil && property.AdditionalProperties.Schema != nil &&
			property.AdditionalProperties.Schema.Type == "string" && property.AdditionalProperties.Schema.MaxLength == nil {
			property.AdditionalProperties.Schema.MaxLength = ptr(int64(labelValueMaxLength))
		}
		walk(&property)
		schema.Properties[name] = property
	}
	if schema.Items != nil && schema.Items.Schema != nil {
		walk(schema.Items.Schema)
	}
}

// isTaint recognises the schema of a core/v1 Taint by its properties.
func isTaint(schema *apiextensionsv1.JSONSchemaProps) bool {
	if schema.Type != "object" || len(schema.Properties) != 4 {
		return false
	}
	for _, name := range []string{"key", "value", "effect", "timeAdded"} {
		if _, ok := schema.Properties[name]; !ok {
			return false
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }

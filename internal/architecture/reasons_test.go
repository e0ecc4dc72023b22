package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTroubleshootingNamesEveryReason checks that every condition reason
// the API defines (a constant of api/v1alpha1 named Reason…, or …Reason…
// such as ConsolidatableReasonMinNodes and DisruptionReasonEmpty, and the
// Reason… constants of api/autoscaling) has a row in docs/troubleshooting.md's tables, written as `Reason`,
// so that a reason a user can see is never one the guide does not explain.
func TestTroubleshootingNamesEveryReason(t *testing.T) {
	root := moduleRoot(t)
	reasons := apiReasons(t, filepath.Join(root, "api", "v1alpha1"))
	if len(reasons) < 40 {
		t.Fatalf("found %d reasons in api/v1alpha1; expected every condition reason", len(reasons))
	}
	// And the reasons claimscale writes on the autoscaling SIG's kinds
	// (ProvisioningRequest, CapacityBuffer).
	for _, version := range []string{"v1", "v1beta1"} {
		for name, value := range apiReasons(t, filepath.Join(root, "api", "autoscaling", version)) {
			reasons["autoscaling/"+version+"."+name] = value
		}
	}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows strings.Builder
	for _, line := range strings.Split(string(guide), "\n") {
		if strings.HasPrefix(line, "|") {
			rows.WriteString(line + "\n")
		}
	}
	for name, value := range reasons {
		if !strings.Contains(rows.String(), "`"+value+"`") {
			t.Errorf("docs/troubleshooting.md has no table row naming `%s` (%s)", value, name)
		}
	}
}

// apiReasons reads the string constants of the API package whose names
// say they are reasons, by name.
func apiReasons(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range parsed.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				value := spec.(*ast.ValueSpec)
				for i, name := range value.Names {
					if !isReason(name.Name) || i >= len(value.Values) {
						continue
					}
					if lit, ok := value.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						text, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						reasons[name.Name] = text
					}
				}
			}
		}
	}
	return reasons
}

// isReason says whether an API constant's name says it is a condition
// reason: not an annotation or label that speaks of one.
func isReason(name string) bool {
	for _, prefix := range []string{"Annotation", "Label", "Tag"} {
		if strings.HasPrefix(name, prefix) {
			return false
		}
	}
	return strings.Contains(name, "Reason")
}

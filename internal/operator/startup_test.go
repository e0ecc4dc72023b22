package operator

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// The startup log says a dry run is one; a normal start does not.
func TestStartupLogSaysDryRun(t *testing.T) {
	for _, tt := range []struct {
		name   string
		dryRun bool
		want   []string
		absent string
	}{
		{name: "dry run", dryRun: true, want: []string{"starting in dry-run", `"dryRun"=true`, `"mode"="native"`}},
		{name: "acting", want: []string{`"msg"="starting"`, `"mode"="native"`}, absent: "dry-run"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
			LogStart(logger, "v1.2.3", Options{Mode: ModeNative, ClusterName: "test", DryRun: tt.dryRun})
			if len(lines) != 1 {
				t.Fatalf("%d lines logged, want 1: %q", len(lines), lines)
			}
			for _, want := range tt.want {
				if !strings.Contains(lines[0], want) {
					t.Errorf("startup log %q lacks %q", lines[0], want)
				}
			}
			if tt.absent != "" && strings.Contains(lines[0], tt.absent) {
				t.Errorf("startup log %q says %q", lines[0], tt.absent)
			}
		})
	}
}

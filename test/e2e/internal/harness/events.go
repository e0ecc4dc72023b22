package harness

import (
	"context"
	"strings"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

// EventsOf returns the reasons and notes of the events about an object.
func EventsOf(g *WithT, kind, name string) []string {
	var list corev1.EventList
	g.Expect(env.Client.List(context.Background(), &list)).To(Succeed())
	var found []string
	for _, event := range list.Items {
		if event.InvolvedObject.Kind == kind && event.InvolvedObject.Name == name {
			found = append(found, event.Reason+": "+event.Message)
		}
	}
	return found
}

// ContainsAny says whether one of the lines contains substring.
func ContainsAny(lines []string, substring string) bool {
	for _, line := range lines {
		if strings.Contains(line, substring) {
			return true
		}
	}
	return false
}

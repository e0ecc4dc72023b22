package proxmox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	pmx "github.com/luthermonson/go-proxmox"
	"k8s.io/utils/clock"
)

// taskError is a Proxmox task that failed; the exit status is its text.
type taskError struct {
	UPID       string
	Node       string
	ExitStatus string
}

// taskSucceeded says whether a stopped task's exit status is success:
// "OK", or "WARNINGS: N" for a task that logged warnings and finished
// (pve-common PVE::UPID::status_is_error). go-proxmox v0.4.0 counts only
// "OK" as success, so its IsSuccessful is not used.
func taskSucceeded(exitStatus string) bool {
	return exitStatus == "OK" || taskWarnings.MatchString(exitStatus)
}

var taskWarnings = regexp.MustCompile(`^WARNINGS: \d+$`)

func (e *taskError) Error() string { return e.ExitStatus }

// taskTimeoutError is a task still running at the deadline. It may yet
// finish; what it makes is adopted by the next call. The message leaves out
// the UPID, which names the user or API token.
type taskTimeoutError struct {
	Type    string
	Node    string
	Timeout time.Duration
	Last    error
}

func (e *taskTimeoutError) Error() string {
	msg := fmt.Sprintf("task %s on %s still running after %s", e.Type, e.Node, e.Timeout)
	if e.Last != nil {
		msg += " (last poll: " + e.Last.Error() + ")"
	}
	return msg
}

func (e *taskTimeoutError) Unwrap() error { return e.Last }

// tasks waits for Proxmox tasks by polling their status.
type tasks struct {
	api      *api
	clock    clock.WithTicker
	interval time.Duration
	timeout  time.Duration
}

// wait polls the task until it stops, the deadline passes or ctx ends. A
// poll that fails with a retryable error is tried again until the deadline:
// the task runs on regardless of one lost answer. A nil task (a call that
// answered synchronously) is done already.
func (t *tasks) wait(ctx context.Context, task *pmx.Task) error {
	return t.waitFor(ctx, task, t.timeout)
}

// waitFor is wait with another deadline than the tasks' default.
func (t *tasks) waitFor(ctx context.Context, task *pmx.Task, timeout time.Duration) error {
	if task == nil {
		return nil
	}
	deadline := t.clock.Now().Add(timeout)
	ticker := t.clock.NewTicker(t.interval)
	defer ticker.Stop()
	var last error
	for {
		err := t.api.do(ctx, task.Ping)
		switch {
		case err == nil && task.IsCompleted:
			if taskSucceeded(task.ExitStatus) {
				return nil
			}
			return &taskError{UPID: string(task.UPID), Node: task.Node, ExitStatus: task.ExitStatus}
		case err != nil && (ctx.Err() != nil || !pollRetryable(err)):
			return err
		case err != nil:
			last = err
		}
		if !t.clock.Now().Before(deadline) {
			return &taskTimeoutError{Type: task.Type, Node: task.Node, Timeout: timeout, Last: last}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C():
		}
	}
}

// pollRetryable says whether a failed status poll is worth another try.
func pollRetryable(err error) bool {
	var failed *apiError
	if errors.As(err, &failed) {
		return failed.Code >= 500 || failed.Code == 429 || failed.Code == 408
	}
	// Transport errors: a dropped connection, a timeout.
	return true
}

// Package cronwindow reads the cron windows of disruption budgets and
// capacity schedules: a five-field cron expression or a descriptor, in
// UTC, active for a duration after each time it fires.
package cronwindow

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Parse reads a schedule: a five-field cron expression or a descriptor such
// as @daily, in UTC. robfig/cron would also take a time zone prefix
// (CRON_TZ=, TZ=) and @every; the API admits neither, and neither means
// anything for a window that is in UTC by definition.
func Parse(spec string) (cron.Schedule, error) {
	trimmed := strings.TrimSpace(spec)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") || strings.HasPrefix(trimmed, "@every") {
		return nil, fmt.Errorf("parsing schedule %q: time zones and @every are not budget schedules", spec)
	}
	schedule, err := cron.ParseStandard(trimmed)
	if err != nil {
		return nil, fmt.Errorf("parsing schedule %q: %w", spec, err)
	}
	return schedule, nil
}

// ActiveAt reports whether the window of spec covers now: the schedule
// fired within the last duration. A schedule that does not parse, that
// never fires (30 February), or a duration that is not positive, is an
// error: the window cannot say when it holds, so the caller must not
// guess.
func ActiveAt(spec string, duration time.Duration, now time.Time) (bool, error) {
	schedule, err := Parse(spec)
	if err != nil {
		return false, err
	}
	if duration <= 0 {
		return false, fmt.Errorf("duration %s must be positive", duration)
	}
	now = now.UTC()
	windowStart := schedule.Next(now.Add(-duration))
	if windowStart.IsZero() {
		// Next found no time within five years of the window's start.
		// Ask again from now: a window that began before a year the
		// schedule reaches is no proof that it never fires.
		if schedule.Next(now).IsZero() {
			return false, fmt.Errorf("schedule %q never fires", spec)
		}
		return false, nil
	}
	return !windowStart.After(now), nil
}

package cli

import (
	"fmt"
	"time"
)

// deadlineFlag is --deadline: a duration from now ("90m") or an RFC 3339
// time ("2026-11-24T09:00:00Z"), kept as the duration from now.
type deadlineFlag struct {
	d   time.Duration
	now func() time.Time
}

func (f *deadlineFlag) String() string {
	if f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f *deadlineFlag) Type() string { return "deadline" }

func (f *deadlineFlag) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return fmt.Errorf("%q is not after now; give a positive duration such as 90m", s)
		}
		f.d = d
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("%q is neither a duration (90m, 2h) nor an RFC 3339 time (2026-11-24T09:00:00Z)", s)
	}
	now := time.Now
	if f.now != nil {
		now = f.now
	}
	d := t.Sub(now())
	if d <= 0 {
		return fmt.Errorf("%s is in the past", t.Format(time.RFC3339))
	}
	f.d = d
	return nil
}

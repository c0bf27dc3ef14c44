package lock

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInspect(t *testing.T) {
	t.Parallel()
	dead := deadPID(t)
	self := os.Getpid()
	start := selfStartTime()
	remote := func(pid int, expires time.Duration) Owner {
		o := foreignOwner(pid, "elsewhere:1")
		o.Host = "elsewhere.invalid"
		o.ExpiresAt = time.Now().Add(expires)
		return o
	}
	expired := foreignOwner(self, start)
	expired.ExpiresAt = time.Now().Add(-time.Second)

	tests := []struct {
		name    string
		content func() []byte // nil: no file
		age     time.Duration // mtime in the past
		want    Reason
		stale   bool
		alive   bool
		local   bool
		holder  bool
	}{
		{name: "free", want: ReasonFree},
		{name: "held by live local process", content: record(foreignOwner(self, start)), want: ReasonHeld, alive: true, local: true, holder: true},
		{name: "live process, age alone never stale", content: record(foreignOwner(self, start)), age: 1000 * time.Hour, want: ReasonHeld, alive: true, local: true, holder: true},
		{name: "holder process gone", content: record(foreignOwner(dead, "boot:1")), want: ReasonProcessGone, stale: true, local: true, holder: true},
		{name: "pid reused", content: record(foreignOwner(self, "other-boot:1")), want: ReasonPIDReused, stale: true, local: true, holder: true},
		{name: "expired live process is hung, never stale", content: record(expired), want: ReasonHung, alive: true, local: true, holder: true},
		{name: "remote not expired, dead-looking pid", content: record(remote(dead, time.Hour)), want: ReasonHeld, holder: true},
		{name: "remote expired", content: record(remote(self, -time.Second)), want: ReasonExpired, stale: true, holder: true},
		{name: "empty in grace", content: func() []byte { return nil }, want: ReasonMetadataInGrace},
		{name: "garbage in grace", content: func() []byte { return []byte("1234\n") }, want: ReasonMetadataInGrace},
		{name: "empty past grace", content: func() []byte { return []byte{} }, age: 10 * time.Second, want: ReasonMetadataMissing, stale: true},
		{name: "garbage past grace", content: func() []byte { return []byte(`{"pid":1234}`) }, age: 10 * time.Second, want: ReasonMetadataUnreadable, stale: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			if tt.content != nil {
				require.NoError(t, os.WriteFile(s.path, tt.content(), 0o644))
				mtime := time.Now().Add(-tt.age)
				require.NoError(t, os.Chtimes(s.path, mtime, mtime))
			}
			before, _ := os.Stat(s.path)

			st, err := Inspect(s.path, Options{})
			require.NoError(t, err)
			require.Equal(t, tt.want, st.Reason, st.Detail)
			require.Equal(t, tt.stale, st.Stale, "stale")
			require.Equal(t, tt.alive, st.Alive, "alive")
			require.Equal(t, tt.local, st.Local, "local")
			require.Equal(t, tt.holder, st.Holder != nil, "holder")
			require.Equal(t, tt.want == ReasonFree, st.Free())
			require.NotEmpty(t, st.Detail)

			// Inspect changes nothing.
			after, err := os.Stat(s.path)
			if before == nil {
				require.ErrorIs(t, err, os.ErrNotExist)
				return
			}
			require.NoError(t, err)
			require.True(t, os.SameFile(before, after))
			require.Equal(t, before.ModTime(), after.ModTime())
			require.Equal(t, before.Size(), after.Size())
		})
	}
}

func record(o Owner) func() []byte {
	return func() []byte {
		data, err := o.Encode()
		if err != nil {
			panic(err)
		}
		return data
	}
}

// TestMetadataGrace: a lock file without a record (a foreign tool, or a
// writer that crashed before writing) is held during the grace period,
// measured by its mtime on the injected clock, and reclaimable after it.
func TestMetadataGrace(t *testing.T) {
	t.Parallel()
	for _, content := range []string{"", "not a record"} {
		t.Run("content="+content, func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			require.NoError(t, os.WriteFile(s.path, []byte(content), 0o644))
			info, err := os.Stat(s.path)
			require.NoError(t, err)
			clk := newFakeClock()
			clk.Set(info.ModTime().Add(time.Second))
			l := New(s.path, Options{Clock: clk.Now, MissingMetaGrace: 2 * time.Second})

			err = l.TryAcquire(s.ctx)
			var held *HeldError
			require.ErrorAs(t, err, &held)
			require.Equal(t, ReasonMetadataInGrace, held.Reason)
			require.Nil(t, held.Holder)
			require.Contains(t, err.Error(), "no readable owner record yet")
			data, err := os.ReadFile(s.path)
			require.NoError(t, err)
			require.Equal(t, content, string(data), "not reclaimed within grace")

			clk.Set(info.ModTime().Add(2*time.Second + time.Millisecond))
			require.NoError(t, l.TryAcquire(s.ctx))
			rec, ok := l.Reclaimed()
			require.True(t, ok)
			want := ReasonMetadataMissing
			if content != "" {
				want = ReasonMetadataUnreadable
			}
			require.Equal(t, want, rec.Reason)
			require.NoError(t, l.Release())
		})
	}
}

// TestStartTimeMismatchIsReclaimed: a record naming a live PID (this test
// process) with another start time is a reused PID: reclaimed at once,
// long before its expiry.
func TestStartTimeMismatchIsReclaimed(t *testing.T) {
	t.Parallel()
	s := setup(t)
	putRecord(t, s.path, foreignOwner(os.Getpid(), "previous-boot:12345"))
	l := New(s.path, Options{TTL: time.Hour})
	require.NoError(t, l.TryAcquire(s.ctx))
	rec, ok := l.Reclaimed()
	require.True(t, ok)
	require.Equal(t, ReasonPIDReused, rec.Reason)
	require.Equal(t, "previous-boot:12345", rec.Holder.StartTime)
	require.NoError(t, l.Release())
}

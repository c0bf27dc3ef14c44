package ids

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewIsValidAndOrdered(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	g := NewGenerator(func() time.Time { return now })
	prev := ""
	for i := 0; i < 10000; i++ {
		if i%1000 == 0 {
			now = now.Add(time.Millisecond)
		}
		id := g.New(Session)
		require.NoError(t, Check(Session, id))
		require.Greater(t, id, prev, "ids must increase")
		prev = id
		ts, err := Time(Session, id)
		require.NoError(t, err)
		require.Equal(t, now, ts)
	}
}

func TestCheckRejects(t *testing.T) {
	t.Parallel()
	good := New(Session)
	for _, bad := range []string{
		"", "ses_", good[:len(good)-1], good + "0", "run_" + good[4:],
		"ses_" + strings.Repeat("u", 26), // u is not in the alphabet
		"ses_" + strings.Repeat("Z", 26), // upper case is not accepted
		"ses_../../../../etc/passwd0000",
		"ses_8" + strings.Repeat("0", 25), // overflow
	} {
		require.ErrorIs(t, Check(Session, bad), ErrInvalid, "%q", bad)
	}
	require.NoError(t, Check(Session, good))
}

func FuzzCheck(f *testing.F) {
	f.Add(New(Session))
	f.Add("ses_../x")
	f.Fuzz(func(t *testing.T, s string) {
		if Check(Session, s) == nil {
			if strings.ContainsAny(s[4:], "/.\\\x00") || len(s) != 30 {
				t.Fatalf("accepted %q", s)
			}
		}
	})
}

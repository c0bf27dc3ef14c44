package api

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/belayhq/belay/apitype"
	"github.com/stretchr/testify/require"
)

// TestDurationRange: a duration beyond time.Duration's range or below
// zero is an error. 1e300 seconds used to convert to a negative
// time.Duration, which the lease handler then replaced by its default TTL.
func TestDurationRange(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`1e300`, `-1`, `-1e300`, `1e10`, `9223372037`, `"-5s"`, `"3000000h"`, `"soon"`, `true`, `{}`} {
		var d apitype.Duration
		require.Error(t, json.Unmarshal([]byte(in), &d), "%s", in)
	}
	for in, want := range map[string]time.Duration{
		`0`: 0, `1.5`: 1500 * time.Millisecond, `"90s"`: 90 * time.Second, `9223372036`: 9223372036 * time.Second,
	} {
		var d apitype.Duration
		require.NoError(t, json.Unmarshal([]byte(in), &d), "%s", in)
		require.Equal(t, want, time.Duration(d), "%s", in)
	}

	b := setup(t, "")
	code, raw := b.do("POST", "/v1/inbox/lease", `{"owner":"a","ttl":1e300}`, nil)
	require.Equal(t, http.StatusBadRequest, code, "%s", raw)
	require.Equal(t, apitype.CodeInvalid, errCode(t, raw))
	require.Contains(t, string(raw), "bad duration 1e300")
}

// FuzzDuration: a Duration either decodes to a value in [0, MaxInt64]
// that matches what the input says, or is an error; a decoded value
// survives a JSON round trip.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{`1e300`, `-1`, `1e10`, `9223372036.854775807`, `9223372036.8547`, `0`, `0.5`,
		`1e-10`, `"1m30s"`, `"-1s"`, `"2562047h47m16.854775807s"`, `"2562047h48m"`, `null`, `"x"`, `[]`, `-0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var d apitype.Duration
		if err := json.Unmarshal(in, &d); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if d < 0 {
			t.Fatalf("%s decoded to negative %v", in, time.Duration(d))
		}
		var s string
		var secs float64
		switch {
		case string(in) == "null":
			// json leaves d alone.
		case json.Unmarshal(in, &s) == nil:
			want, err := time.ParseDuration(s)
			if err != nil || want != time.Duration(d) {
				t.Fatalf("%s decoded to %v, ParseDuration says %v, %v", in, time.Duration(d), want, err)
			}
		case json.Unmarshal(in, &secs) == nil:
			if got := float64(d) / float64(time.Second); math.Abs(got-secs) > 1e-9*math.Max(1, secs) {
				t.Fatalf("%s decoded to %v (%v s)", in, time.Duration(d), got)
			}
		default:
			t.Fatalf("%s decoded although it is neither a string nor a number", in)
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back apitype.Duration
		if err := json.Unmarshal(out, &back); err != nil || back != d {
			t.Fatalf("round trip of %v: %s -> %v, %v", time.Duration(d), out, time.Duration(back), err)
		}
		// The number form of the same value decodes too (to within float
		// precision).
		num := strconv.FormatFloat(time.Duration(d).Seconds(), 'g', -1, 64)
		if err := json.Unmarshal([]byte(num), &back); err != nil && float64(d) < 9e18 {
			t.Fatalf("%v as %s seconds: %v", time.Duration(d), num, err)
		}
	})
}

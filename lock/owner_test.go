package lock

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleOwner() Owner {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	return Owner{
		Host: "h1", PID: 1234, StartTime: "boot:42", Nonce: "00ff", Incarnation: "inc_1", Purpose: "daemon",
		AcquiredAt: t0, HeartbeatAt: t0.Add(time.Second), ExpiresAt: t0.Add(31 * time.Second),
	}
}

// requireSameOwner compares owners with time.Equal semantics.
func requireSameOwner(t testing.TB, want, got Owner) {
	t.Helper()
	require.True(t, want.AcquiredAt.Equal(got.AcquiredAt), "acquiredAt %s != %s", want.AcquiredAt, got.AcquiredAt)
	require.True(t, want.HeartbeatAt.Equal(got.HeartbeatAt), "heartbeatAt %s != %s", want.HeartbeatAt, got.HeartbeatAt)
	require.True(t, want.ExpiresAt.Equal(got.ExpiresAt), "expiresAt %s != %s", want.ExpiresAt, got.ExpiresAt)
	want.AcquiredAt, want.HeartbeatAt, want.ExpiresAt = time.Time{}, time.Time{}, time.Time{}
	got.AcquiredAt, got.HeartbeatAt, got.ExpiresAt = time.Time{}, time.Time{}, time.Time{}
	require.Equal(t, want, got)
}

func TestOwnerEncodeGolden(t *testing.T) {
	t.Parallel()
	data, err := sampleOwner().Encode()
	require.NoError(t, err)
	require.Equal(t, `{"version":1,"host":"h1","pid":1234,"startTime":"boot:42","nonce":"00ff","incarnation":"inc_1","purpose":"daemon",`+
		`"acquiredAt":"2026-03-01T12:00:00.123456789Z","heartbeatAt":"2026-03-01T12:00:01.123456789Z","expiresAt":"2026-03-01T12:00:31.123456789Z"}`+"\n",
		string(data))
	got, err := DecodeOwner(data)
	require.NoError(t, err)
	requireSameOwner(t, sampleOwner(), got)
}

func TestOwnerEncodeUTC(t *testing.T) {
	t.Parallel()
	o := sampleOwner()
	o.ExpiresAt = o.ExpiresAt.In(time.FixedZone("X", 3600))
	data, err := o.Encode()
	require.NoError(t, err)
	require.Contains(t, string(data), `"expiresAt":"2026-03-01T12:00:31.123456789Z"`)
}

func TestDecodeOwner(t *testing.T) {
	t.Parallel()
	valid := `"host":"h","pid":1,"nonce":"n","expiresAt":"2026-03-01T12:00:00Z"`
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{name: "minimal", data: `{"version":1,` + valid + `}`},
		{name: "newer version keeps v1 fields", data: `{"version":7,"fencing":9,` + valid + `}`},
		{name: "offset times", data: `{"version":1,"host":"h","pid":1,"nonce":"n","expiresAt":"2026-03-01T13:00:00+01:00"}`},
		{name: "surrounding whitespace", data: "\n {\"version\":1," + valid + "}\n\n"},
		{name: "empty", data: "", wantErr: "empty"},
		{name: "blank", data: " \n", wantErr: "empty"},
		{name: "not json", data: "pid=1234", wantErr: "invalid"},
		{name: "truncated", data: `{"version":1,"host":"h"`, wantErr: "EOF"},
		{name: "trailing data", data: `{"version":1,` + valid + `}{}`, wantErr: "trailing"},
		{name: "no version", data: `{` + valid + `}`, wantErr: "version 0"},
		{name: "no host", data: `{"version":1,"pid":1,"nonce":"n","expiresAt":"2026-03-01T12:00:00Z"}`, wantErr: "no host"},
		{name: "no pid", data: `{"version":1,"host":"h","nonce":"n","expiresAt":"2026-03-01T12:00:00Z"}`, wantErr: "pid 0"},
		{name: "negative pid", data: `{"version":1,"host":"h","pid":-1,"nonce":"n","expiresAt":"2026-03-01T12:00:00Z"}`, wantErr: "pid -1"},
		{name: "no nonce", data: `{"version":1,"host":"h","pid":1,"expiresAt":"2026-03-01T12:00:00Z"}`, wantErr: "no nonce"},
		{name: "no expiry", data: `{"version":1,"host":"h","pid":1,"nonce":"n"}`, wantErr: "no expiresAt"},
		{name: "time out of range", data: `{"version":1,"host":"h","pid":1,"nonce":"n","expiresAt":"0000-01-01T00:00:00+01:00"}`, wantErr: "out of range"},
		{name: "wrong type", data: `{"version":"1"}`, wantErr: "cannot unmarshal"},
		{name: "too big", data: `{"version":1,"purpose":"` + strings.Repeat("x", maxRecordSize) + `",` + valid + `}`, wantErr: "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := DecodeOwner([]byte(tt.data))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrMalformed)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			again, err := o.Encode()
			require.NoError(t, err)
			o2, err := DecodeOwner(again)
			require.NoError(t, err)
			requireSameOwner(t, o, o2)
		})
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*Owner){
		"no host":      func(o *Owner) { o.Host = "" },
		"zero pid":     func(o *Owner) { o.PID = 0 },
		"no nonce":     func(o *Owner) { o.Nonce = "" },
		"no expiry":    func(o *Owner) { o.ExpiresAt = time.Time{} },
		"bad utf8":     func(o *Owner) { o.Purpose = "\xff" },
		"year 10000":   func(o *Owner) { o.ExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"huge purpose": func(o *Owner) { o.Purpose = strings.Repeat("p", maxRecordSize) },
	} {
		o := sampleOwner()
		mutate(&o)
		_, err := o.Encode()
		require.ErrorIs(t, err, ErrMalformed, name)
	}
}

func FuzzDecodeOwner(f *testing.F) {
	seed, _ := sampleOwner().Encode()
	f.Add(seed)
	f.Add([]byte(""))
	f.Add([]byte("{}"))
	f.Add([]byte(`{"version":2,"host":"h","pid":1,"nonce":"n","expiresAt":"2026-03-01T12:00:00Z","x":[1,2]}`))
	f.Add([]byte(`{"version":1,"host":"h","pid":1,"nonce":"n","expiresAt":"0000-01-01T00:30:00+01:00"}`))
	f.Add([]byte(`{"version":1,"host":"h","pid":9223372036854775807,"nonce":"\u0000","expiresAt":"9999-12-31T23:59:59.999999999Z"}`))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := DecodeOwner(data)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		// Whatever decodes re-encodes, and decode(encode(x)) == x.
		enc, err := o.Encode()
		require.NoError(t, err)
		o2, err := DecodeOwner(enc)
		require.NoError(t, err)
		requireSameOwner(t, o, o2)
		enc2, err := o2.Encode()
		require.NoError(t, err)
		require.Equal(t, string(enc), string(enc2), "encoding is canonical")
	})
}

func FuzzOwnerRoundTrip(f *testing.F) {
	o := sampleOwner()
	f.Add(o.Host, o.PID, o.StartTime, o.Nonce, o.Incarnation, o.Purpose, o.AcquiredAt.UnixNano(), int64(time.Second), int64(31*time.Second), 3600)
	f.Add("ü", 1, "", "\x00", "", "\"\\", int64(0), int64(-1), int64(1), -7200)
	f.Fuzz(func(t *testing.T, host string, pid int, start, nonce, inc, purpose string, acquired, hb, exp int64, zoneOffset int) {
		zone := time.FixedZone("z", zoneOffset%(18*3600))
		base := time.Unix(0, acquired).In(zone)
		o := Owner{Host: host, PID: pid, StartTime: start, Nonce: nonce, Incarnation: inc, Purpose: purpose,
			AcquiredAt: base, HeartbeatAt: base.Add(time.Duration(hb)), ExpiresAt: base.Add(time.Duration(exp))}
		enc, err := o.Encode()
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		got, err := DecodeOwner(enc)
		require.NoError(t, err)
		requireSameOwner(t, o, got)
	})
}

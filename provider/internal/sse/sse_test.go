package sse

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func decodeAll(t *testing.T, in string) ([]Event, error) {
	t.Helper()
	d := NewDecoder(strings.NewReader(in))
	var out []Event
	for {
		ev, err := d.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev)
	}
}

func TestDecoder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []Event
		err  error
	}{
		{"data only", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []Event{{Data: `{"a":1}`}, {Data: "[DONE]"}}, nil},
		{"named", "event: ping\ndata: {\"type\":\"ping\"}\n\n", []Event{{Type: "ping", Data: `{"type":"ping"}`}}, nil},
		{"multi-line data", "data: a\ndata: b\n\n", []Event{{Data: "a\nb"}}, nil},
		{"crlf", "event: x\r\ndata: 1\r\n\r\n", []Event{{Type: "x", Data: "1"}}, nil},
		{"lone cr", "data: 1\r\rdata: 2\r\r", []Event{{Data: "1"}, {Data: "2"}}, nil},
		{"comment", ": keepalive\n\ndata: 1\n\n", []Event{{Comment: true, Data: "keepalive"}, {Data: "1"}}, nil},
		{"bom", "\uFEFFdata: 1\n\n", []Event{{Data: "1"}}, nil},
		{"no space", "data:1\n\n", []Event{{Data: "1"}}, nil},
		{"id persists", "id: 7\ndata: a\n\ndata: b\n\n", []Event{{Data: "a", ID: "7"}, {Data: "b", ID: "7"}}, nil},
		{"event without data fires nothing", "event: x\n\ndata: 1\n\n", []Event{{Data: "1"}}, nil},
		{"retry and unknown ignored", "retry: 10\nfoo: bar\ndata: 1\n\n", []Event{{Data: "1"}}, nil},
		{"empty data fires", "data\n\n", []Event{{Data: ""}}, nil},
		{"cut mid-event", "data: 1\n\ndata: {\"par", []Event{{Data: "1"}}, io.ErrUnexpectedEOF},
		{"empty", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeAll(t, tt.in)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecoderLineTooLong(t *testing.T) {
	t.Parallel()
	_, err := decodeAll(t, "data: "+strings.Repeat("x", MaxLine+1)+"\n\n")
	require.ErrorIs(t, err, ErrLineTooLong)
}

func FuzzDecoder(f *testing.F) {
	f.Add("data: 1\n\n")
	f.Add("event: a\r\ndata: b\r\n\r\n: c\n")
	f.Add("data: 1\r")
	f.Fuzz(func(t *testing.T, in string) {
		d := NewDecoder(strings.NewReader(in))
		for i := 0; i <= len(in)+1; i++ {
			if _, err := d.Next(); err != nil {
				return
			}
		}
		t.Fatal("decoder returned more events than input bytes")
	})
}

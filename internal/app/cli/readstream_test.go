package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJSONStringWriter: any split of the text into writes gives the JSON
// string encoding/json gives for the whole.
func TestJSONStringWriter(t *testing.T) {
	t.Parallel()
	text := "héllo <wörld> & \"q\"\n\t\u2028 日本語 😀 \xff end"
	want, _ := json.Marshal(text)
	for cut := 0; cut <= len(text); cut++ {
		for cut2 := cut; cut2 <= len(text); cut2 += 3 {
			var out bytes.Buffer
			w := &jsonStringWriter{w: &out}
			for _, part := range []string{text[:cut], text[cut:cut2], text[cut2:]} {
				_, err := w.Write([]byte(part))
				require.NoError(t, err)
			}
			require.NoError(t, w.flush())
			require.Equal(t, string(want[1:len(want)-1]), out.String(), "cuts %d %d", cut, cut2)
		}
	}
}

// TestTrimWriter: a streamed strings.TrimSpace.
func TestTrimWriter(t *testing.T) {
	t.Parallel()
	for _, parts := range [][]string{
		{"  \n", " hello", " world \n", "\n  "},
		{"", "a", "", " ", "b", "\t\n"},
		{"   ", "\n"},
		{"x"},
	} {
		var out bytes.Buffer
		w := &trimWriter{w: &out}
		for _, p := range parts {
			_, err := w.Write([]byte(p))
			require.NoError(t, err)
		}
		require.Equal(t, strings.TrimSpace(strings.Join(parts, "")), out.String(), "%q", parts)
	}
}

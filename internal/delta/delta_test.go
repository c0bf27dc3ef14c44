package delta

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzAppendText checks the fast unquote against encoding/json: the same
// text for every data json accepts, an error for every data it refuses.
func FuzzAppendText(f *testing.F) {
	for _, s := range []string{"", "plain", "a\nb\t\"c\"\\", "<>&\u2028\u2029", "ü€😀", "\x00\x1f", "\xff"} {
		d, _ := json.Marshal(map[string]string{"text": s})
		f.Add(d)
	}
	f.Add([]byte(`{"text":"\ud83d\ude00"}`))
	f.Add([]byte(`{"text":"a"b"}`))
	f.Add([]byte(`{"text":"\u00e9\/\b\f\r"}`))
	f.Add([]byte(`{"text":"x","text":"y"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := AppendText([]byte("prefix"), data)
		var want struct {
			Text string `json:"text"`
		}
		jerr := json.Unmarshal(data, &want)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("appendText err %v, json err %v", err, jerr)
		}
		if err == nil && string(got) != "prefix"+want.Text {
			t.Fatalf("appendText %q, json %q", got, want.Text)
		}
		if !strings.HasPrefix(string(got), "prefix") {
			t.Fatalf("dst was not kept: %q", got)
		}
	})
}

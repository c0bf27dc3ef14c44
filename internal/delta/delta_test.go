package delta

import (
	"bytes"
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

// encodeString is the reference escaper: encoding/json without HTML escaping.
func encodeString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// FuzzEscape holds Escape to encoding/json.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "a\nb\t\"c\"\\", "<>&\u2028\u2029", "ü€😀", "\x00\x1f\x7f", "\xff\xfe", "\b\f\r", "é\xc3", "\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := encodeString(s)
		got := append(Escape([]byte{'"'}, []byte(s)), '"')
		if !bytes.Equal(want, got) {
			t.Fatalf("Escape(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

// FuzzAppendEscaped holds the one-pass re-escaping to decoding with
// encoding/json and escaping again: the same bytes for every data json
// accepts, an error for every data it refuses.
func FuzzAppendEscaped(f *testing.F) {
	for _, s := range []string{"", "plain", "a\nb\t\"c\"\\", "<>&\u2028\u2029", "ü€😀", "\x00\x1f", "\xff", "\xe2\x80\xa8"} {
		d, _ := json.Marshal(map[string]string{"text": s})
		f.Add(d)
	}
	f.Add([]byte(`{"text":"\ud83d\ude00"}`))
	f.Add([]byte(`{"text":"\u003c\u2028\u0008\u001F\/\ufffd"}`))
	f.Add([]byte(`{"text":"a"b"}`))
	f.Add([]byte(`{"text":"x","text":"y"}`))
	f.Add([]byte("{\"text\":\"\xe2\x80\xa9\xff\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := AppendEscaped([]byte("prefix"), data)
		var want struct {
			Text string `json:"text"`
		}
		jerr := json.Unmarshal(data, &want)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("AppendEscaped err %v, json err %v", err, jerr)
		}
		if err != nil {
			return
		}
		w := encodeString(want.Text)
		if string(got) != "prefix"+string(w[1:len(w)-1]) {
			t.Fatalf("AppendEscaped %q, json %q", got, w)
		}
	})
}

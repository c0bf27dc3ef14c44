package cmdline

import (
	"os/exec"
	"strings"
	"testing"
)

// TestQuoteRoundTrips: a POSIX shell reads every quoted word back as it
// was, whatever bytes it holds.
func TestQuoteRoundTrips(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	words := []string{"chatgpt", "", "a b", "it's", `"x"`, "$HOME", "`id`", "http://127.0.0.1:8080/app?x=1&y=2", "a\nb", "*", "~", "x;y", "--url", "=x", "%1", "a,b", "k=v"}
	line := Join(append([]string{"printf", `%s\0`}, words...)...)
	out, err := exec.Command(sh, "-c", line).Output()
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(words, "|") {
		t.Fatalf("the shell read %q from %s, want %q", got, line, words)
	}
	for in, want := range map[string]string{"run_1": "run_1", "": "''", "/a b/it's": `'/a b/it'\''s'`, "=x": "'=x'", "k=v": "k=v"} {
		if q := Quote(in); q != want {
			t.Errorf("Quote(%q) = %s, want %s", in, q, want)
		}
	}
}

func TestBrowserSite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ verb, provider, site, url, want string }{
		{"check", "", "chatgpt", "", "belay browser check chatgpt"},
		{"check", "browser", "chatgpt", "", "belay browser check chatgpt"},
		{"login", "browser", "loopback", "http://127.0.0.1:1/", "belay browser login loopback --url http://127.0.0.1:1/"},
		{"check", "work", "my site", "http://h/?a=1&b=2", "belay browser check 'my site' --provider work --url 'http://h/?a=1&b=2'"},
	} {
		if got := BrowserSite(tc.verb, tc.provider, tc.site, tc.url); got != tc.want {
			t.Errorf("BrowserSite(%q, %q, %q, %q) = %s, want %s", tc.verb, tc.provider, tc.site, tc.url, got, tc.want)
		}
	}
}

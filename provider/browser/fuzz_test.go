package browser

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseSite: any bytes as a site profile parse or fail with an error,
// never panic; a profile that parses is valid.
func FuzzParseSite(f *testing.F) {
	for _, name := range []string{"chatgpt", "loopback", "loopback-v2"} {
		b, err := embedded.ReadFile("sites/" + name + ".toml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("name = \"x\"\nstart_url = \"http://h/\"\nconversation_path = '(a'\n[selectors]\ncomposer = \"a\"\nassistant_turn = \"b\"\nuser_turn = \"c\"\n")
	f.Fuzz(func(t *testing.T, data string) {
		s, err := ParseSite([]byte(data), "fuzz")
		if err != nil {
			return
		}
		if s.Name == "" || s.convRE == nil || s.Completion.StablePolls <= 0 {
			t.Fatalf("invalid profile parsed: %+v", s)
		}
		_ = s.Conversation(s.StartURL + "c/0123456789abcdef")
	})
}

// FuzzParseCursor: any cursor text decodes or fails, never panics.
func FuzzParseCursor(f *testing.F) {
	f.Add(`{"run":"run_1","site":"chatgpt","phase":"sent","hash":"ab","baseline":2,"chrome":{"pid":7,"token":"b:1","ws":"ws://127.0.0.1:1/x","profile":"/p"}}`)
	f.Add(`{"phase":1}`)
	f.Add(`nul`)
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseCursor(s)
	})
}

// FuzzReapRecord: whatever a run directory's browser record holds, Reap
// returns without panicking and deletes nothing outside the run's
// directory. (A record naming a live process with its true start time is
// out of a fuzzer's reach; the identity checks are tested with real
// processes in reap_test.go.)
func FuzzReapRecord(f *testing.F) {
	f.Add(`{"browser":{"pid":1,"token":"x:1","profile":"/"},"owner":{"host":"h","pid":2,"token":"y"}}`)
	f.Add(`{"browser":{"pid":-1,"profile":"../../outside"},"owner":{}}`)
	f.Add(`{`)
	f.Fuzz(func(t *testing.T, rec string) {
		dir := t.TempDir()
		outside := filepath.Join(dir, "outside")
		if err := os.MkdirAll(outside, 0o700); err != nil {
			t.Fatal(err)
		}
		runDir := filepath.Join(dir, "runs", "ses_f", "run_f")
		if err := os.MkdirAll(runDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(runDir, recordName), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := New("browser", Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Reap(ReapOptions{})
		if _, err := os.Stat(outside); err != nil {
			t.Fatalf("reap deleted a directory outside the run's: %v", err)
		}
	})
}

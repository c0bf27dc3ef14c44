package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/belayhq/belay/transcript"
)

// BenchmarkStreamRepair profiles the streaming check and repair of a
// generated damaged 50 MB session of each tree format (go test -bench
// StreamRepair -cpuprofile ...); `belay bench repair` is the measurement.
func BenchmarkStreamRepair(b *testing.B) {
	for _, f := range []transcript.Format{transcript.FormatPi, transcript.FormatClaude} {
		dir := b.TempDir()
		orig := filepath.Join(dir, "orig.jsonl")
		if _, err := genSession(orig, f, 50e6); err != nil {
			b.Fatal(err)
		}
		for _, mode := range []struct {
			name string
			opts transcript.FileOptions
		}{
			{"lines", transcript.FileOptions{Format: f, LinesOnly: true}},
			{"check", transcript.FileOptions{Format: f, DryRun: true}},
			{"default", transcript.FileOptions{Format: f}},
		} {
			b.Run(string(f)+"/"+mode.name, func(b *testing.B) {
				path := filepath.Join(dir, "s.jsonl")
				b.SetBytes(50e6)
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					if err := copyPath(path, orig); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					rep, err := transcript.RepairFile(path, mode.opts)
					if err != nil {
						b.Fatal(err)
					}
					if rep.Backup != "" {
						b.StopTimer()
						_ = os.Remove(rep.Backup)
						b.StartTimer()
					}
				}
			})
		}
	}
}

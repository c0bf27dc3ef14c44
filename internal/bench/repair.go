package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay/transcript"
)

// RepairConfig configures the transcript repair benchmark.
type RepairConfig struct {
	// Dir is where the generated session files go (a temporary directory
	// is made inside it and removed after).
	Dir string
	// Size is the larger session file; the smaller one is a tenth of it.
	Size int64
	// Messages is N for the message-level pairing measurement, which also
	// runs 10N.
	Messages int
	// Progress, if set, is told what is running.
	Progress func(string)
}

// RepairResult is `belay bench repair --json`.
type RepairResult struct {
	Format string `json:"format"`
	// Files are the file-level repairs, smaller file first.
	Files []RepairFile `json:"files"`
	// TargetMBPerSec is the throughput goal for file-level repair.
	TargetMBPerSec float64 `json:"target_mb_per_sec"`
	// Pairing is message-level repair at N and 10N messages.
	Pairing []PairingRun `json:"pairing"`
	// PairingScale is time(10N) / time(N): about 10 when linear.
	PairingScale float64 `json:"pairing_scale"`
}

// RepairFile is one file-level repair: a generated pi session with an
// invalid line every 1000 lines, repaired in place (backup, temp file,
// fsync, rename).
type RepairFile struct {
	Bytes      int64   `json:"bytes"`
	Lines      int     `json:"lines"`
	Dropped    int     `json:"dropped_lines"`
	Seconds    float64 `json:"seconds"`
	MBPerSec   float64 `json:"mb_per_sec"`
	ScanOnlyMB float64 `json:"scan_mb_per_sec"`
	// PeakHeapBytes is the largest live heap sampled during the repair.
	PeakHeapBytes uint64 `json:"peak_heap_bytes"`
	// PeakRSSBytes is the process's peak resident set during the repair
	// (Linux; 0 where it cannot be reset and read).
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// PairingRun times RepairMessages on a generated conversation.
type PairingRun struct {
	Messages     int     `json:"messages"`
	Seconds      float64 `json:"seconds"`
	NsPerMessage float64 `json:"ns_per_message"`
	Changes      int     `json:"changes"`
}

// Repair runs the transcript repair benchmark.
func Repair(ctx context.Context, cfg RepairConfig) (*RepairResult, error) {
	if cfg.Size <= 0 {
		cfg.Size = 200e6
	}
	if cfg.Messages <= 0 {
		cfg.Messages = 20000
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	res := &RepairResult{Format: string(transcript.FormatPi), TargetMBPerSec: 200}
	for _, size := range []int64{cfg.Size / 10, cfg.Size} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cfg.Progress(fmt.Sprintf("file-level repair of a %s pi session", humanBytes(size)))
		r, err := repairOnce(filepath.Join(root, "session-"+strconv.FormatInt(size, 10)+".jsonl"), size)
		if err != nil {
			return nil, err
		}
		res.Files = append(res.Files, *r)
	}
	for _, n := range []int{cfg.Messages, cfg.Messages * 10} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cfg.Progress(fmt.Sprintf("message-level pairing of %d messages", n))
		res.Pairing = append(res.Pairing, pairOnce(n))
	}
	if res.Pairing[0].Seconds > 0 {
		res.PairingScale = res.Pairing[1].Seconds / res.Pairing[0].Seconds
	}
	return res, nil
}

// genSession writes a pi session of about size bytes with an invalid line
// every 1000 lines and returns the line and invalid line counts.
func genSession(path string, size int64) (lines, bad int, err error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n int64
	write := func(s string) {
		k, _ := w.WriteString(s)
		n += int64(k)
		lines++
	}
	write(`{"type":"session","version":3,"id":"bench-0000-4000-8000-000000000000","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/bench"}` + "\n")
	text := strings.Repeat("lorem ipsum dolor sit amet ", 8)
	parent := "null"
	for i := 0; n < size; i++ {
		id := fmt.Sprintf("%08x", i)
		var line string
		switch i % 4 {
		case 0:
			line = `{"type":"message","id":"` + id + `","parentId":` + parent + `,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"` + text + `","timestamp":1772359201000}}`
		case 1:
			line = `{"type":"message","id":"` + id + `","parentId":` + parent + `,"timestamp":"2026-03-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"` + text + `"},{"type":"toolCall","id":"call_` + id + `","name":"read","arguments":{"path":"a.go"}}],"model":"m","stopReason":"toolUse","timestamp":1772359202000}}`
		case 2:
			line = `{"type":"message","id":"` + id + `","parentId":` + parent + `,"timestamp":"2026-03-01T10:00:03.000Z","message":{"role":"toolResult","toolCallId":"call_` + fmt.Sprintf("%08x", i-1) + `","toolName":"read","content":[{"type":"text","text":"` + text + `"}],"isError":false,"timestamp":1772359203000}}`
		default:
			line = `{"type":"message","id":"` + id + `","parentId":` + parent + `,"timestamp":"2026-03-01T10:00:04.000Z","message":{"role":"assistant","content":[{"type":"text","text":"` + text + `"}],"model":"m","stopReason":"stop","timestamp":1772359204000}}`
		}
		if lines%1000 == 0 || lines == 3 {
			line = line[:len(line)/2] // torn
			bad++
		}
		write(line + "\n")
		parent = `"` + id + `"`
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, 0, fmt.Errorf("bench: %w", err)
	}
	return lines, bad, f.Close()
}

func repairOnce(path string, size int64) (*RepairFile, error) {
	lines, bad, err := genSession(path, size)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	out := &RepairFile{Bytes: fi.Size(), Lines: lines}
	// Scan only (dry run): the validating pass.
	start := time.Now()
	if _, err := transcript.RepairFile(path, transcript.FileOptions{Format: transcript.FormatPi, LinesOnly: true, DryRun: true}); err != nil {
		return nil, err
	}
	out.ScanOnlyMB = float64(fi.Size()) / 1e6 / time.Since(start).Seconds()

	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	stop := samplePeakHeap()
	start = time.Now()
	rep, err := transcript.RepairFile(path, transcript.FileOptions{Format: transcript.FormatPi, LinesOnly: true})
	elapsed := time.Since(start)
	out.PeakHeapBytes = stop()
	out.PeakRSSBytes = peakRSS()
	if err != nil {
		return nil, err
	}
	if rep.Status != transcript.StatusRepaired {
		return nil, fmt.Errorf("bench: expected a repair, got %s", rep.Status)
	}
	out.Dropped = len(rep.Changes)
	if out.Dropped != bad {
		return nil, fmt.Errorf("bench: dropped %d lines, generated %d bad ones", out.Dropped, bad)
	}
	out.Seconds = elapsed.Seconds()
	out.MBPerSec = float64(fi.Size()) / 1e6 / out.Seconds
	_ = os.Remove(rep.Backup)
	_ = os.Remove(path)
	return out, nil
}

// samplePeakHeap samples the live heap until the returned func is called,
// which returns the largest sample.
func samplePeakHeap() func() uint64 {
	var (
		mu   sync.Mutex
		peak uint64
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value; v.Kind() == metrics.KindUint64 {
			mu.Lock()
			peak = max(peak, v.Uint64())
			mu.Unlock()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		read()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// resetPeakRSS resets the kernel's peak RSS mark (Linux: clear_refs 5).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS reads the peak RSS since the last reset (Linux VmHWM).
func peakRSS() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// genConversation makes n messages: user, assistant with three calls,
// results out of order, one missing and one duplicated per turn, ids reused
// across turns.
func genConversation(n int) []transcript.Message {
	msgs := make([]transcript.Message, 0, n)
	text := func(s string) []transcript.Block { return []transcript.Block{{Type: transcript.BlockText, Text: s}} }
	result := func(id string) transcript.Message {
		return transcript.Message{Role: transcript.RoleTool, Blocks: []transcript.Block{{Type: transcript.BlockToolResult, CallID: id, Content: text("ok")}}}
	}
	for len(msgs) < n {
		msgs = append(msgs, transcript.Message{Role: transcript.RoleUser, Blocks: text("go")})
		var calls []transcript.Block
		for _, id := range []string{"exec_0", "exec_1", "exec_2"} {
			calls = append(calls, transcript.Block{Type: transcript.BlockToolCall, ID: id, Name: "run", Input: []byte(`{}`)})
		}
		msgs = append(msgs, transcript.Message{Role: transcript.RoleAssistant, Blocks: calls})
		msgs = append(msgs, result("exec_1"), result("exec_0"), result("exec_0"))
		msgs = append(msgs, transcript.Message{Role: transcript.RoleAssistant, Blocks: text("done")})
	}
	return msgs[:n]
}

func pairOnce(n int) PairingRun {
	msgs := genConversation(n)
	runtime.GC()
	start := time.Now()
	_, rep := transcript.RepairMessages(msgs)
	el := time.Since(start)
	return PairingRun{Messages: n, Seconds: el.Seconds(), NsPerMessage: float64(el.Nanoseconds()) / float64(n), Changes: len(rep.Changes)}
}

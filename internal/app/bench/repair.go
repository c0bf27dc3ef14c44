package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay/internal/gotune"
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
	// Rounds is how many times each file is repaired each way (the ways
	// alternating); each way reports its median round. Default 3.
	Rounds int
	// Progress, if set, is told what is running.
	Progress func(string)
}

// Targets of the repair benchmark (issue 13).
const (
	TargetRepairMBPerSec = 200      // default repair (line and message level)
	TargetCheckMBPerSec  = 400      // check: the same, writing nothing
	TargetPeakRSSBytes   = 64 << 20 // during any repair
	TargetScale          = 11       // time(size) / time(size/10)
)

// RepairResult is `belay bench repair --json`.
type RepairResult struct {
	TargetMBPerSec      float64 `json:"target_mb_per_sec"`
	TargetCheckMBPerSec float64 `json:"target_check_mb_per_sec"`
	TargetPeakRSSBytes  int64   `json:"target_peak_rss_bytes"`
	TargetScale         float64 `json:"target_scale"`
	// Rounds is how many times each file was repaired each way; each way
	// reports its median round, with the peak RSS and heap of all rounds.
	Rounds int `json:"rounds"`
	// Formats are the tree formats measured: pi and Claude Code.
	Formats []RepairFormat `json:"formats"`
	// Pairing is message-level repair at N and 10N messages.
	Pairing []PairingRun `json:"pairing"`
	// PairingScale is time(10N) / time(N): about 10 when linear.
	PairingScale float64 `json:"pairing_scale"`
	// GOGC is the collector's setting the repairs ran at (-1: off).
	GOGC int `json:"gogc"`
}

// RepairFormat is one format at two sizes.
type RepairFormat struct {
	Format string `json:"format"`
	// Files are the generated sessions, the smaller (a tenth) first.
	Files []RepairFile `json:"files"`
	// Scale is the default repair's time on the larger file over its time
	// on the smaller one: about 10 when it scales linearly.
	Scale float64 `json:"scale"`
	// RSSGrowth is the default repair's peak RSS on the larger file over
	// its peak RSS on the smaller one: about 1 when memory is flat.
	RSSGrowth float64 `json:"rss_growth"`
}

// RepairFile is one generated session, damaged (torn lines, orphan
// results, lines lost so that their children's parent links break), and
// the three ways of repairing it, each on the same damaged bytes.
type RepairFile struct {
	Bytes  int64 `json:"bytes"`
	Lines  int   `json:"lines"`
	Torn   int   `json:"torn_lines"`
	Orphan int   `json:"orphan_results"`
	Lost   int   `json:"lost_lines"`
	// LinesOnly is `belay repair --lines-only`, the baseline.
	LinesOnly RepairRun `json:"lines_only"`
	// Check is the default repair with --dry-run: everything but writing.
	Check RepairRun `json:"check"`
	// Default is `belay repair`: line and message level, backup, temp
	// file, fsync, rename.
	Default RepairRun `json:"default"`
}

// RepairRun is one repair of a file.
type RepairRun struct {
	Seconds  float64 `json:"seconds"`
	MBPerSec float64 `json:"mb_per_sec"`
	// CPUSeconds is the process's CPU time (all threads, user and system)
	// during the repair: on a busy machine, MB per CPU second says more
	// than MB per second.
	CPUSeconds float64 `json:"cpu_seconds"`
	Changes    int     `json:"changes"`
	// Kinds counts the changes by kind.
	Kinds map[string]int `json:"kinds"`
	// MessageLevel says whether message-level repair ran.
	MessageLevel bool `json:"message_level"`
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
	if cfg.Rounds <= 0 {
		cfg.Rounds = 3
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	res := &RepairResult{TargetMBPerSec: TargetRepairMBPerSec, TargetCheckMBPerSec: TargetCheckMBPerSec,
		TargetPeakRSSBytes: TargetPeakRSSBytes, TargetScale: TargetScale, Rounds: cfg.Rounds,
		GOGC: gotune.Current().GCPercent}
	for _, f := range []transcript.Format{transcript.FormatPi, transcript.FormatClaude} {
		rf := RepairFormat{Format: string(f)}
		for _, size := range []int64{cfg.Size / 10, cfg.Size} {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			cfg.Progress(fmt.Sprintf("repair of a %s %s session", humanBytes(size), f))
			r, err := repairFile(root, f, size, cfg.Rounds)
			if err != nil {
				return nil, err
			}
			rf.Files = append(rf.Files, *r)
		}
		if small := rf.Files[0].Default; small.Seconds > 0 {
			rf.Scale = rf.Files[1].Default.Seconds / small.Seconds
		}
		if small := rf.Files[0].Default; small.PeakRSSBytes > 0 {
			rf.RSSGrowth = float64(rf.Files[1].Default.PeakRSSBytes) / float64(small.PeakRSSBytes)
		}
		res.Formats = append(res.Formats, rf)
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

// damage is what a generated session holds.
type damage struct{ lines, torn, orphan, lost int }

// genSession writes a session of format f of about size bytes: turns of a
// user prompt, an assistant reply with two tool calls (Claude Code: one
// line per call, each result on its own call's line), their results and a
// final reply. Every 1000 lines or so it tears a line, adds a result that
// answers no call, and leaves out a line (its child's parent link breaks).
func genSession(path string, f transcript.Format, size int64) (damage, error) {
	var dmg damage
	out, err := os.Create(path)
	if err != nil {
		return dmg, fmt.Errorf("bench: %w", err)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	var n int64
	seq := 0
	write := func(line string) {
		seq++
		switch {
		case seq%1000 == 500 || seq == 40:
			dmg.lost++
			return // lost: never written
		case seq%1000 == 0 || seq == 80:
			dmg.torn++
			line = line[:len(line)/2]
		}
		k, _ := w.WriteString(line)
		_ = w.WriteByte('\n')
		n += int64(k) + 1
		dmg.lines++
	}
	text := strings.Repeat("lorem ipsum dolor sit amet ", 8)
	parent := "null"
	id := func(i int) string {
		if f == transcript.FormatPi {
			return fmt.Sprintf("%08x", i)
		}
		return fmt.Sprintf("6a1f0e2d-0000-4000-8000-%012d", i)
	}
	next := 0
	q := func(s string) string { return `"` + s + `"` }
	if f == transcript.FormatPi {
		write(`{"type":"session","version":3,"id":"bench-0000-4000-8000-000000000000","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/bench"}`)
	}
	for turn := 0; n < size; turn++ {
		c1, c2 := fmt.Sprintf("call_%d_a", turn), fmt.Sprintf("call_%d_b", turn)
		if f == transcript.FormatPi {
			msg := func(body string) {
				next++
				write(`{"type":"message","id":"` + id(next) + `","parentId":` + parent + `,"timestamp":"2026-03-01T10:00:01.000Z","message":` + body + `}`)
				parent = q(id(next))
			}
			msg(`{"role":"user","content":"` + text + `","timestamp":1772359201000}`)
			msg(`{"role":"assistant","content":[{"type":"text","text":"` + text + `"},{"type":"toolCall","id":"` + c1 + `","name":"read","arguments":{"path":"a.go"}},{"type":"toolCall","id":"` + c2 + `","name":"read","arguments":{"path":"b.go"}}],"model":"m","stopReason":"toolUse","timestamp":1772359202000}`)
			for _, c := range []string{c1, c2} {
				msg(`{"role":"toolResult","toolCallId":"` + c + `","toolName":"read","content":[{"type":"text","text":"` + text + `"}],"isError":false,"timestamp":1772359203000}`)
			}
			if turn%100 == 99 || turn == 3 {
				dmg.orphan++
				msg(`{"role":"toolResult","toolCallId":"stray_` + c1 + `","toolName":"read","content":[{"type":"text","text":"stray"}],"isError":false,"timestamp":1772359203000}`)
			}
			msg(`{"role":"assistant","content":[{"type":"text","text":"` + text + `"}],"model":"m","stopReason":"stop","timestamp":1772359204000}`)
			continue
		}
		env := func(typ, par string) string {
			next++
			return `{"parentUuid":` + par + `,"isSidechain":false,"userType":"external","cwd":"/bench","sessionId":"6a1f0e2d-0000-4000-8000-000000000000","version":"2.1.121","gitBranch":"main","type":"` + typ + `","uuid":"` + id(next) + `","timestamp":"2026-03-01T10:00:01.000Z",`
		}
		asst := func(par, block, resp string) string {
			line := env("assistant", par) + `"message":{"id":"` + resp + `","type":"message","role":"assistant","model":"m","content":[` + block + `],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":9}},"requestId":"req_` + resp + `"}`
			write(line)
			return q(id(next))
		}
		result := func(par, call string) string {
			write(env("user", par) + `"message":{"role":"user","content":[{"tool_use_id":"` + call + `","type":"tool_result","content":"` + text + `"}]},"toolUseResult":{"stdout":"ok"},"sourceToolAssistantUUID":` + par + `}`)
			return q(id(next))
		}
		write(env("user", parent) + `"message":{"role":"user","content":"` + text + `"}}`)
		parent = q(id(next))
		resp := fmt.Sprintf("msg_%d", turn)
		parent = asst(parent, `{"type":"text","text":"`+text+`"}`, resp)
		a1 := asst(parent, `{"type":"tool_use","id":"`+c1+`","name":"Read","input":{"file_path":"a.go"}}`, resp)
		a2 := asst(a1, `{"type":"tool_use","id":"`+c2+`","name":"Read","input":{"file_path":"b.go"}}`, resp)
		result(a1, c1)
		parent = result(a2, c2)
		if turn%100 == 99 || turn == 3 {
			dmg.orphan++
			parent = result(parent, "stray_"+c1)
		}
		parent = asst(parent, `{"type":"text","text":"`+text+`"}`, resp+"_end")
	}
	if err := w.Flush(); err != nil {
		out.Close()
		return dmg, fmt.Errorf("bench: %w", err)
	}
	return dmg, out.Close()
}

// repairFile generates a session and repairs it three ways, each from the
// same damaged bytes, rounds times each (the ways alternating, so that a
// change in the machine's speed falls on all of them); each way reports its
// median round, with the largest peak RSS and heap of its rounds.
func repairFile(dir string, f transcript.Format, size int64, rounds int) (*RepairFile, error) {
	orig := filepath.Join(dir, "orig-"+string(f)+"-"+strconv.FormatInt(size, 10)+".jsonl")
	dmg, err := genSession(orig, f, size)
	if err != nil {
		return nil, err
	}
	defer os.Remove(orig)
	fi, err := os.Stat(orig)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	out := &RepairFile{Bytes: fi.Size(), Lines: dmg.lines, Torn: dmg.torn, Orphan: dmg.orphan, Lost: dmg.lost}
	path := filepath.Join(dir, "session.jsonl")
	ways := []struct {
		into *RepairRun
		opts transcript.FileOptions
		runs []RepairRun
	}{
		{into: &out.LinesOnly, opts: transcript.FileOptions{Format: f, LinesOnly: true}},
		{into: &out.Check, opts: transcript.FileOptions{Format: f, DryRun: true}},
		{into: &out.Default, opts: transcript.FileOptions{Format: f}},
	}
	for range rounds {
		for i := range ways {
			if err := copyPath(path, orig); err != nil {
				return nil, err
			}
			r, err := repairRun(path, fi.Size(), ways[i].opts)
			if err != nil {
				return nil, err
			}
			ways[i].runs = append(ways[i].runs, *r)
			_ = os.Remove(path)
		}
	}
	for _, w := range ways {
		*w.into = medianRun(w.runs)
	}
	if out.Default.Kinds[transcript.ChangeDropLine] != dmg.torn || out.Default.Kinds[transcript.ChangeRelink] < dmg.lost ||
		out.Default.Kinds[transcript.ChangeDropOrphan] < dmg.orphan {
		return nil, fmt.Errorf("bench: %s repair found %v, generated %+v", f, out.Default.Kinds, dmg)
	}
	return out, nil
}

// medianRun returns the run of median time, with the largest peak RSS and
// heap of all the runs.
func medianRun(runs []RepairRun) RepairRun {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b RepairRun) int { return cmp.Compare(a.Seconds, b.Seconds) })
	m := sorted[len(sorted)/2]
	for _, r := range runs {
		m.PeakRSSBytes = max(m.PeakRSSBytes, r.PeakRSSBytes)
		m.PeakHeapBytes = max(m.PeakHeapBytes, r.PeakHeapBytes)
	}
	return m
}

func copyPath(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer in.Close()
	o, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return fmt.Errorf("bench: %w", err)
	}
	// On disk before the repair is timed, as a transcript to repair is:
	// else the kernel writes the copy back while the repair runs, and
	// the repair is timed with the bench's own I/O.
	if err := o.Sync(); err != nil {
		o.Close()
		return fmt.Errorf("bench: %w", err)
	}
	return o.Close()
}

func repairRun(path string, size int64, opts transcript.FileOptions) (*RepairRun, error) {
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	stop := samplePeakHeap()
	cpu := cpuSeconds()
	start := time.Now()
	rep, err := transcript.RepairFile(path, opts)
	elapsed := time.Since(start)
	out := &RepairRun{CPUSeconds: cpuSeconds() - cpu, PeakHeapBytes: stop(), PeakRSSBytes: peakRSS()}
	if err != nil {
		return nil, err
	}
	want := transcript.StatusRepaired
	if opts.DryRun {
		want = transcript.StatusWould
	}
	if rep.Status != want {
		return nil, fmt.Errorf("bench: expected %s, got %s", want, rep.Status)
	}
	out.Seconds = elapsed.Seconds()
	out.MBPerSec = float64(size) / 1e6 / out.Seconds
	out.Changes = len(rep.Changes)
	out.MessageLevel = rep.Messages
	out.Kinds = map[string]int{}
	for _, c := range rep.Changes {
		out.Kinds[c.Kind]++
	}
	if rep.Backup != "" {
		_ = os.Remove(rep.Backup)
	}
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

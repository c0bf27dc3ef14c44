package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/store/fsstore"
)

// ReadConfig configures the read benchmark.
type ReadConfig struct {
	// Dir is where the scratch data directory goes.
	Dir string
	// Exe is the belay executable: the daemon and the reading CLI run as
	// their own processes, so each one's memory is measured alone.
	Exe string
	// Size is the answer's length in bytes; Chunk the length of each text
	// delta it is journaled in.
	Size  int64
	Chunk int
	// Progress, if set, is told what is going on.
	Progress func(string)
}

// ReadResult is `belay bench read --json`.
type ReadResult struct {
	AnswerBytes  int64   `json:"answer_bytes"`
	Chunk        int     `json:"chunk_bytes"`
	Events       int64   `json:"events"`
	JournalBytes int64   `json:"journal_bytes"`
	Seconds      float64 `json:"read_seconds"`
	MBPerSec     float64 `json:"read_mb_per_sec"`
	// Peak resident memory of each process (VmHWM).
	DaemonPeakRSS int64 `json:"daemon_peak_rss_bytes"`
	CLIPeakRSS    int64 `json:"cli_peak_rss_bytes"`
	// CPU time (user+system) each process spent on the read, and the
	// throughput the busier of the two allows on an otherwise idle machine
	// (they run in parallel, one core each).
	DaemonCPUSeconds float64 `json:"daemon_cpu_seconds"`
	CLICPUSeconds    float64 `json:"cli_cpu_seconds"`
	CPUBoundMBPerSec float64 `json:"cpu_bound_mb_per_sec"`
	// Verified says the bytes read back are the answer journaled.
	Verified bool `json:"verified"`
}

// Read journals a run whose answer is cfg.Size bytes, starts a daemon on
// it, and times `belay read RUN` to a pipe, checking every byte.
func Read(ctx context.Context, cfg ReadConfig) (*ReadResult, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1 << 30
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = 4 << 10
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	if cfg.Exe == "" {
		return nil, errors.New("bench: read needs the belay executable")
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-read-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	data := filepath.Join(root, "data")

	cfg.Progress(fmt.Sprintf("journaling a run with a %s answer in %d-byte deltas", humanBytes(cfg.Size), cfg.Chunk))
	run, events, want, err := journalAnswer(ctx, data, cfg.Size, cfg.Chunk, nil)
	if err != nil {
		return nil, err
	}
	res := &ReadResult{AnswerBytes: cfg.Size, Chunk: cfg.Chunk, Events: events}
	if fi, err := os.Stat(filepath.Join(data, "sessions", run.Session, "journal.jsonl")); err == nil {
		res.JournalBytes = fi.Size()
	}

	cfg.Progress("starting a daemon")
	daemon, err := startBenchDaemon(ctx, cfg.Exe, data)
	if err != nil {
		return nil, err
	}
	defer daemon.stop()

	cfg.Progress("belay read " + run.ID)
	m, err := measureCLI(ctx, cfg.Exe, daemon, []string{"read", "--data", data, run.ID})
	if err != nil {
		return nil, err
	}
	res.Seconds = m.seconds
	res.MBPerSec = float64(cfg.Size) / 1e6 / res.Seconds
	res.CLIPeakRSS, res.CLICPUSeconds, res.DaemonCPUSeconds = m.cliPeak, m.cliCPU, m.daemonCPU
	res.CPUBoundMBPerSec = float64(cfg.Size) / 1e6 / max(res.DaemonCPUSeconds, res.CLICPUSeconds)
	if res.DaemonPeakRSS, err = processPeakRSS(daemon.cmd.Process.Pid); err != nil {
		return nil, err
	}
	n, sum := m.n, m.crc
	// belay read ends the answer with a newline when it has none.
	if n != cfg.Size+1 || sum != want {
		return nil, fmt.Errorf("bench: belay read printed %d bytes (crc %08x), want %d (crc %08x)", n, sum, cfg.Size+1, want)
	}
	res.Verified = true
	return res, nil
}

// cliRun is what measureCLI saw of one command.
type cliRun struct {
	n         int64   // bytes it printed
	crc       uint32  // their CRC-32C
	seconds   float64 // from start to exit
	cliPeak   int64   // its peak RSS
	cliCPU    float64 // its CPU seconds
	daemonCPU float64 // the daemon's CPU seconds meanwhile
}

// measureCLI runs `belay args...` against daemon with its output to a
// pipe, and measures its time, its peak memory and CPU, and the daemon's
// CPU meanwhile.
func measureCLI(ctx context.Context, exe string, daemon *benchDaemon, args []string) (cliRun, error) {
	var m cliRun
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "BELAY_NO_AUTOSTART=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return m, err
	}
	daemonCPU0, err := processCPU(daemon.cmd.Process.Pid)
	if err != nil {
		return m, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return m, fmt.Errorf("bench: start belay %s: %w", args[0], err)
	}
	// ru_maxrss would count the memory of this process, which the child
	// shares until it execs: watch the child's own high-water mark instead.
	var cliPeak atomic.Int64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := processPeakRSS(cmd.Process.Pid); err == nil && v > cliPeak.Load() {
				cliPeak.Store(v)
			}
			select {
			case <-stopWatch:
				return
			case <-t.C:
			}
		}
	}()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	n, cerr := io.CopyBuffer(h, out, make([]byte, 256<<10))
	if v, err := processPeakRSS(cmd.Process.Pid); err == nil && v > cliPeak.Load() {
		cliPeak.Store(v) // at EOF: the output is all written
	}
	close(stopWatch)
	<-watched
	werr := cmd.Wait()
	elapsed := time.Since(start)
	if cerr != nil || werr != nil {
		return m, fmt.Errorf("bench: belay %s: %v %v: %s", args[0], werr, cerr, stderr.String())
	}
	daemonCPU1, err := processCPU(daemon.cmd.Process.Pid)
	if err != nil {
		return m, err
	}
	return cliRun{
		n: n, crc: h.Sum32(), seconds: elapsed.Seconds(), cliPeak: cliPeak.Load(),
		cliCPU:    (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(),
		daemonCPU: daemonCPU1 - daemonCPU0,
	}, nil
}

// answerText is the repeating text of the answer: prose with the
// characters JSON escapes (quotes, newlines, <, >, &) and some non-ASCII.
const answerText = "A long answer is read back one journal line at a time: the daemon decodes each text delta and writes it\n" +
	"to the connection, and the CLI copies the bytes to its output, so neither holds the answer in memory.\n" +
	"Prose has \"quotes\", <tags> & ampersands, tabs\tand non-ASCII letters (ünïcödé, 日本語), like real output.\n" +
	"\n"

// journalAnswer writes a session with one complete run whose answer is size
// bytes, in deltas of chunk bytes, and returns the run, the events of its
// answer, and the CRC-32C of what belay read prints for it. each, if set,
// is given every delta's text.
func journalAnswer(ctx context.Context, dir string, size int64, chunk int, each func(string)) (belay.Run, int64, uint32, error) {
	st, err := fsstore.Open(ctx, dir, fsstore.Options{FS: vfs.NoSync(vfs.OS)})
	if err != nil {
		return belay.Run{}, 0, 0, err
	}
	defer st.Close()
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	if err != nil {
		return belay.Run{}, 0, 0, err
	}
	run, _, err := st.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"a very long answer"}`)})
	if err != nil {
		return belay.Run{}, 0, 0, err
	}
	if run, err = st.AcquireRunLease(ctx, run.ID, "bench", time.Hour, 0); err != nil {
		return belay.Run{}, 0, 0, err
	}
	if run, err = st.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Attempt: 1}); err != nil {
		return belay.Run{}, 0, 0, err
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	pattern := strings.Repeat(answerText, chunk/len(answerText)+2)
	var batch []belay.Event
	var written, events int64
	var off int
	for written < size {
		n := int(min(int64(chunk), size-written))
		// Cut on a rune boundary so every delta is valid UTF-8.
		for n > 1 && off+n < len(pattern) && pattern[off+n]&0xc0 == 0x80 {
			n--
		}
		text := pattern[off : off+n]
		if utf8.ValidString(text) {
			off = (off + n) % len(answerText)
		} else {
			// The last few bytes would split a rune (JSON would turn the
			// piece into U+FFFD, three bytes): pad with ASCII instead.
			text = strings.Repeat(".", n)
		}
		b, _ := json.Marshal(map[string]string{"text": text})
		batch = append(batch, belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: b})
		_, _ = io.WriteString(h, text)
		if each != nil {
			each(text)
		}
		written += int64(n)
		events++
		if len(batch) == 256 || written >= size {
			if _, err := st.Append(ctx, sess.ID, belay.Buffered, batch...); err != nil {
				return belay.Run{}, 0, 0, err
			}
			batch = batch[:0]
		}
	}
	if _, err := st.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete}); err != nil {
		return belay.Run{}, 0, 0, err
	}
	_, _ = io.WriteString(h, "\n")
	return run, events, h.Sum32(), st.Close()
}

// benchDaemon is a `belay serve` child process.
type benchDaemon struct {
	cmd  *exec.Cmd
	done chan error
}

func startBenchDaemon(ctx context.Context, exe, data string, args ...string) (*benchDaemon, error) {
	cmd := exec.Command(exe, append([]string{"serve", "--data", data}, args...)...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start daemon: %w", err)
	}
	d := &benchDaemon{cmd: cmd, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	c := client.New(client.Options{Socket: filepath.Join(data, "belay.sock")})
	deadline := time.Now().Add(30 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case err := <-d.done:
			d.done <- err
			return nil, fmt.Errorf("bench: the daemon exited at start: %v", err)
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, errors.New("bench: the daemon did not answer within 30s")
		}
	}
}

// stop ends the daemon with SIGTERM (SIGKILL after 30s) and waits for it.
func (d *benchDaemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// processCPU returns the user+system CPU seconds of a live process.
func processCPU(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: cpu time: %w", err)
	}
	// Fields after the command name, which is in parentheses.
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: bad /proc stat")
	}
	return float64(utime+stime) / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// processPeakRSS returns a process's peak resident set size (VmHWM, Linux).
func processPeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: daemon memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("bench: no VmHWM in /proc status")
}

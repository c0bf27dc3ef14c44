package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// ExportConfig configures the export benchmark.
type ExportConfig struct {
	// Dir is where the scratch data directory goes.
	Dir string
	// Exe is the belay executable: the daemon and the CLI run as their
	// own processes, so each one's memory is measured alone.
	Exe string
	// Size is the answer's length in bytes; Chunk the length of each text
	// delta it is journaled in.
	Size  int64
	Chunk int
	// Format is the export's format (openai if empty).
	Format string
	// Progress, if set, is told what is going on.
	Progress func(string)
}

// ExportPhase is one command's numbers in the export benchmark.
type ExportPhase struct {
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBPerSec float64 `json:"mb_per_sec"`
	// Peak resident memory of each process (VmHWM).
	DaemonPeakRSS int64 `json:"daemon_peak_rss_bytes"`
	CLIPeakRSS    int64 `json:"cli_peak_rss_bytes"`
	// CPU time each process spent, and the throughput the busier of the
	// two allows on an otherwise idle machine.
	DaemonCPUSeconds float64 `json:"daemon_cpu_seconds"`
	CLICPUSeconds    float64 `json:"cli_cpu_seconds"`
	CPUBoundMBPerSec float64 `json:"cpu_bound_mb_per_sec"`
}

// ExportResult is `belay bench export --json`.
type ExportResult struct {
	AnswerBytes  int64  `json:"answer_bytes"`
	Chunk        int    `json:"chunk_bytes"`
	Events       int64  `json:"events"`
	JournalBytes int64  `json:"journal_bytes"`
	Format       string `json:"format"`
	// Read is the baseline: `belay read RUN` of the same run.
	Read ExportPhase `json:"read"`
	// Export is `belay sessions export SESSION --format F`.
	Export ExportPhase `json:"export"`
	// Ratio is the export's MB/s over the read's.
	Ratio float64 `json:"export_to_read"`
	// Verified says the bytes read back are the answer journaled and the
	// export is at least as long; for openai, that the bytes exported are
	// the session's transcript, byte for byte.
	Verified bool `json:"verified"`
}

// Export journals a session whose one run's answer is cfg.Size bytes,
// then, each time with a daemon of its own, reads the answer back with
// `belay read` (the baseline) and exports the session with `belay
// sessions export`, both to a pipe, checking the bytes.
func Export(ctx context.Context, cfg ExportConfig) (*ExportResult, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1 << 30
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = 4 << 10
	}
	if cfg.Format == "" {
		cfg.Format = "openai"
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	if cfg.Exe == "" {
		return nil, errors.New("bench: export needs the belay executable")
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-export-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	data := filepath.Join(root, "data")

	cfg.Progress(fmt.Sprintf("journaling a run with a %s answer in %d-byte deltas", humanBytes(cfg.Size), cfg.Chunk))
	// The openai export of the session, as the transcript package writes
	// it: the prompt, then the answer as one string.
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write([]byte("[\n{\"role\":\"user\",\"content\":\"a very long answer\"},\n{\"role\":\"assistant\",\"content\":\""))
	var esc bytes.Buffer
	enc := json.NewEncoder(&esc)
	enc.SetEscapeHTML(false)
	run, events, want, err := journalAnswer(ctx, data, cfg.Size, cfg.Chunk, func(text string) {
		esc.Reset()
		_ = enc.Encode(text)
		b := bytes.TrimSuffix(esc.Bytes(), []byte("\n"))
		h.Write(b[1 : len(b)-1])
	})
	if err != nil {
		return nil, err
	}
	h.Write([]byte("\"}\n]\n"))
	res := &ExportResult{AnswerBytes: cfg.Size, Chunk: cfg.Chunk, Events: events, Format: cfg.Format}
	if fi, err := os.Stat(filepath.Join(data, "sessions", run.Session, "journal.jsonl")); err == nil {
		res.JournalBytes = fi.Size()
	}

	phase := func(what string, args []string) (cliRun, ExportPhase, error) {
		cfg.Progress("starting a daemon")
		daemon, err := startBenchDaemon(ctx, cfg.Exe, data)
		if err != nil {
			return cliRun{}, ExportPhase{}, err
		}
		defer daemon.stop()
		cfg.Progress(what)
		m, err := measureCLI(ctx, cfg.Exe, daemon, args)
		if err != nil {
			return m, ExportPhase{}, err
		}
		p := ExportPhase{Bytes: m.n, Seconds: m.seconds, MBPerSec: float64(m.n) / 1e6 / m.seconds,
			CLIPeakRSS: m.cliPeak, CLICPUSeconds: m.cliCPU, DaemonCPUSeconds: m.daemonCPU,
			CPUBoundMBPerSec: float64(m.n) / 1e6 / max(m.cliCPU, m.daemonCPU)}
		if p.DaemonPeakRSS, err = processPeakRSS(daemon.cmd.Process.Pid); err != nil {
			return m, p, err
		}
		return m, p, nil
	}
	m, p, err := phase("belay read "+run.ID, []string{"read", "--data", data, run.ID})
	if err != nil {
		return nil, err
	}
	res.Read = p
	// belay read ends the answer with a newline when it has none.
	if m.n != cfg.Size+1 || m.crc != want {
		return nil, fmt.Errorf("bench: belay read printed %d bytes (crc %08x), want %d (crc %08x)", m.n, m.crc, cfg.Size+1, want)
	}
	m, p, err = phase("belay sessions export "+run.Session+" --format "+cfg.Format, []string{"sessions", "export", "--data", data, "--format", cfg.Format, run.Session})
	if err != nil {
		return nil, err
	}
	res.Export = p
	res.Ratio = res.Export.MBPerSec / res.Read.MBPerSec
	if cfg.Format == "openai" && m.crc != h.Sum32() {
		return nil, fmt.Errorf("bench: belay sessions export printed %d bytes (crc %08x), want crc %08x", m.n, m.crc, h.Sum32())
	}
	if m.n < cfg.Size {
		return nil, fmt.Errorf("bench: belay sessions export printed %d bytes, less than the %d of the answer", m.n, cfg.Size)
	}
	res.Verified = true
	return res, nil
}

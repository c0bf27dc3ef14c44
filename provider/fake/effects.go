package fake

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// EffectsFile is the file in Options.EffectsDir that side-effecting tool
// calls append to when they run: one JSON Effect per line.
const EffectsFile = "effects.jsonl"

// Effect records that a side-effecting tool call ran.
type Effect struct {
	Session string    `json:"session"`
	Run     string    `json:"run"`
	Call    string    `json:"call"`
	Tool    string    `json:"tool"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// effectsMu serializes appends within the process; across processes each
// record is one O_APPEND write.
var effectsMu sync.Mutex

// recordEffect appends e to dir's effects file and syncs it, so a record
// survives the process being killed right after the call.
func recordEffect(dir string, e Effect) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	effectsMu.Lock()
	defer effectsMu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, EffectsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadEffects returns the effects recorded in dir, oldest first (none if
// nothing ran yet).
func ReadEffects(dir string) ([]Effect, error) {
	f, err := os.Open(filepath.Join(dir, EffectsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fake: read effects: %w", err)
	}
	defer f.Close()
	var out []Effect
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var e Effect
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("fake: read effects: %s line %d: %w", f.Name(), n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fake: read effects: %w", err)
	}
	return out, nil
}

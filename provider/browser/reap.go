package browser

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reapEvery bounds how often Run looks for orphaned browsers.
const reapEvery = time.Minute

// reapOrphans ends the browsers of runs that are no longer active (a run
// that ended while its daemon was down, so nothing resumed it to close
// its browser) and deletes their profiles. It needs Config.RunActive; it
// runs at most once per reapEvery, from Run.
func (p *Provider) reapOrphans() {
	if p.cfg.RunActive == nil {
		return
	}
	p.reapMu.Lock()
	if time.Since(p.reapedAt) < reapEvery {
		p.reapMu.Unlock()
		return
	}
	p.reapedAt = time.Now()
	p.reapMu.Unlock()
	root := filepath.Join(p.cfg.Dir, "runs") + string(filepath.Separator)
	for pid, profile := range browsersUnder(root) {
		rel := strings.Split(strings.TrimPrefix(profile, root), string(filepath.Separator))
		if len(rel) < 3 || p.cfg.RunActive(rel[0], rel[1]) {
			continue
		}
		// A session leader: its group is the browser and its helpers.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = removeProfile(profile)
	}
}

// browsersUnder returns the browser processes (session leaders, as belay
// starts them) whose profile directory is under root, by pid.
func browsersUnder(root string) map[int]string {
	out := map[int]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if sid, err := unix.Getsid(pid); err != nil || sid != pid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if dir, ok := strings.CutPrefix(arg, "--user-data-dir="); ok && strings.HasPrefix(dir, root) {
				out[pid] = dir
				break
			}
		}
	}
	return out
}

package browser

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// seedMarker is written into a seed profile when a person logged in (or
// imported a profile); its time is the seed's age.
const seedMarker = "belay-seed.json"

// SeedLocked reports whether a login or import holds the seed lock of a
// site now. It creates nothing (doctor uses it).
func SeedLocked(root, site string) bool {
	f, err := os.OpenFile(filepath.Join(root, "seeds", site+".lock"), os.O_RDWR, 0)
	if err != nil {
		return false // no lock file: nobody ever locked it
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// Seed describes the seed profile of a site under root.
func Seed(root, site string) SeedInfo { return seedInfo(root, site) }

// seedLock holds the exclusive lock of a site's seed profile: login,
// import and cloning never overlap.
type seedLock struct{ f *os.File }

// lockSeed takes the lock of the seed of site under root, waiting at most
// wait.
func lockSeed(root, site string, wait time.Duration) (*seedLock, error) {
	if err := os.MkdirAll(filepath.Join(root, "seeds"), 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(root, "seeds", site+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &seedLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("the seed profile of %s is locked (a login is open?): %s", site, path)
			}
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *seedLock) unlock() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
}

// seedDir is the seed profile of site.
func seedDir(root, site string) string { return filepath.Join(root, "seeds", site) }

// SeedInfo describes a site's seed profile.
type SeedInfo struct {
	Dir      string    `json:"dir"`
	Exists   bool      `json:"exists"`
	LoggedAt time.Time `json:"loggedAt,omitzero"` // when a login or import last finished
}

// seedInfo reads what is known about a seed.
func seedInfo(root, site string) SeedInfo {
	d := seedDir(root, site)
	si := SeedInfo{Dir: d}
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		si.Exists = true
	}
	if fi, err := os.Stat(filepath.Join(d, seedMarker)); err == nil {
		si.LoggedAt = fi.ModTime()
	}
	return si
}

// skipInClone reports whether a profile entry is left out of a clone:
// the running browser's locks and sockets, and caches.
func skipInClone(rel string, d fs.DirEntry) bool {
	base := d.Name()
	switch {
	case strings.HasPrefix(base, "Singleton"), base == "DevToolsActivePort", base == "lockfile",
		base == "Crashpad", base == "BrowserMetrics", base == "ShaderCache", base == "GrShaderCache",
		base == "GPUCache", base == "Code Cache", base == "Cache", base == "component_crx_cache":
		return true
	}
	return d.Type()&fs.ModeSocket != 0 || d.Type()&fs.ModeNamedPipe != 0
}

// cloneSeed copies the seed of site (if there is one) into dst under the
// seed lock. A missing seed gives an empty profile.
func cloneSeed(root, site, dst string) error {
	l, err := lockSeed(root, site, 30*time.Second)
	if err != nil {
		return err
	}
	defer l.unlock()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	src := seedDir(root, site)
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return copyTree(src, dst)
}

// copyTree copies a profile directory, skipping what skipInClone names.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || rel == "." {
			return err
		}
		if skipInClone(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type()&fs.ModeSymlink != 0:
			return nil // Chromium's own locks are symlinks; a profile needs none
		case d.Type().IsRegular():
			return copyFile(path, target)
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// removeProfile deletes a run's profile clone. Chromium's helpers can
// still write for a moment after the browser ends, so it tries again.
func removeProfile(dir string) error {
	var err error
	for range 20 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

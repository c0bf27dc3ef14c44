package vfstest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/belayhq/belay/internal/vfs"
)

// PowerCut wraps a vfs.FS and models a machine that loses power: each
// file's content as of its last Sync survives, what was written after it
// is lost (or, as [PowerCut.Cut] decides, a prefix of it survives, as if
// part of the page cache had been written back). Directory entries are
// taken as durable at once. A file first opened through PowerCut counts as
// durable as it was found.
//
// [PowerCut.Freeze] stops the world at the moment of the cut: every later
// change fails with EIO and changes nothing, so that the code under test
// can be closed without writing on; then Cut puts the files in the state
// the machine would find after the power comes back.
type PowerCut struct {
	vfs.FS
	mu     sync.Mutex
	nodes  map[string]*node // by current name
	frozen bool
}

// node is a file as PowerCut knows it: its current name (renames move
// it, as they do an open descriptor's file) and its content as of its
// last sync.
type node struct {
	name    string
	durable []byte
}

// NewPowerCut wraps base (vfs.OS if nil).
func NewPowerCut(base vfs.FS) *PowerCut {
	if base == nil {
		base = vfs.OS
	}
	return &PowerCut{FS: base, nodes: map[string]*node{}}
}

var errFrozen = &fs.PathError{Op: "write", Path: "(power cut)", Err: syscall.EIO}

// Freeze makes every later change fail with EIO.
func (p *PowerCut) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *PowerCut) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// Cut puts every file opened through p back to its durable content. For a
// file whose current content extends its durable content, keep(name, n)
// says how many of the n bytes after it survive (nil: none).
func (p *PowerCut) Cut(keep func(name string, n int) int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for name, n := range p.nodes {
		durable := n.durable
		cur, err := os.ReadFile(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out := durable
		if keep != nil && len(cur) > len(durable) && bytes.HasPrefix(cur, durable) {
			n := min(max(keep(name, len(cur)-len(durable)), 0), len(cur)-len(durable))
			out = cur[:len(durable)+n]
		}
		if !bytes.Equal(out, cur) {
			errs = append(errs, os.WriteFile(name, out, 0o600))
		}
	}
	return errors.Join(errs...)
}

// track returns name's node, recording its durable content the first
// time it is seen.
func (p *PowerCut) track(name string) *node {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.nodes[name]; ok {
		return n
	}
	b, err := os.ReadFile(name)
	if err != nil {
		b = []byte{} // created now: empty until synced
	}
	n := &node{name: name, durable: b}
	p.nodes[name] = n
	return n
}

// OpenFile opens a file whose changes are lost at the cut unless synced.
func (p *PowerCut) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	writes := flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) != 0
	if writes && p.isFrozen() {
		return nil, errFrozen
	}
	var n *node
	if writes {
		n = p.track(name)
	}
	f, err := p.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &cutFile{File: f, p: p, n: n}, nil
}

// Rename moves the durable content with the name.
func (p *PowerCut) Rename(oldpath, newpath string) error {
	if p.isFrozen() {
		return errFrozen
	}
	if err := p.FS.Rename(oldpath, newpath); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.nodes, newpath) // replaced
	for name, n := range p.nodes {
		if name == oldpath || strings.HasPrefix(name, oldpath+string(os.PathSeparator)) {
			delete(p.nodes, name)
			n.name = newpath + strings.TrimPrefix(name, oldpath)
			p.nodes[n.name] = n
		}
	}
	return nil
}

// Remove removes name and forgets it.
func (p *PowerCut) Remove(name string) error {
	if p.isFrozen() {
		return errFrozen
	}
	p.forget(name)
	return p.FS.Remove(name)
}

// RemoveAll removes path and forgets what was under it.
func (p *PowerCut) RemoveAll(path string) error {
	if p.isFrozen() {
		return errFrozen
	}
	p.forget(path)
	return p.FS.RemoveAll(path)
}

func (p *PowerCut) forget(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.nodes {
		if name == path || strings.HasPrefix(name, path+string(os.PathSeparator)) {
			delete(p.nodes, name)
		}
	}
}

// MkdirAll fails once frozen.
func (p *PowerCut) MkdirAll(path string, perm fs.FileMode) error {
	if p.isFrozen() {
		return errFrozen
	}
	return p.FS.MkdirAll(path, perm)
}

// SyncDir fails once frozen.
func (p *PowerCut) SyncDir(dir string) error {
	if p.isFrozen() {
		return errFrozen
	}
	return p.FS.SyncDir(dir)
}

type cutFile struct {
	vfs.File
	p *PowerCut
	n *node // nil: opened read-only
}

func (f *cutFile) Write(b []byte) (int, error) {
	if f.p.isFrozen() {
		return 0, errFrozen
	}
	return f.File.Write(b)
}

func (f *cutFile) Truncate(size int64) error {
	if f.p.isFrozen() {
		return errFrozen
	}
	return f.File.Truncate(size)
}

// Sync makes the file's current content the content that survives.
func (f *cutFile) Sync() error {
	if f.p.isFrozen() {
		return errFrozen
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	if f.n == nil {
		return nil
	}
	// Read by name: the file may be open for writing only. Under p.mu, so
	// that the node's name is current (renames update it).
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	b, err := os.ReadFile(f.n.name)
	if err != nil {
		return err
	}
	f.n.durable = b
	return nil
}

//go:build !linux

package fsstore

import "io/fs"

// stamp reports that the store index is not used here: only Linux's stat
// is known to give a change time (which no program can set back) and an
// inode number.
func stamp(fs.FileInfo) (fileStamp, bool) { return fileStamp{}, false }

//go:build !linux

package vfs

import (
	"io/fs"
	"os"
)

func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}

//go:build !unix

package transcript

import (
	"io/fs"
	"os"
)

// keepModeOwner gives path the mode of fi.
func keepModeOwner(path string, fi fs.FileInfo) error {
	return os.Chmod(path, fi.Mode().Perm())
}

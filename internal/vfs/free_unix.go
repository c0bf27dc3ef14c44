//go:build unix

package vfs

import "golang.org/x/sys/unix"

// FreeBytes returns how many bytes an unprivileged writer may still use on
// the filesystem holding path.
func FreeBytes(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

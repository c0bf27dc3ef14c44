package vfs

import (
	"errors"
	"syscall"
)

// IsNoSpace reports whether err means the filesystem (or the user's quota)
// is full: ENOSPC or EDQUOT anywhere in its chain.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

//go:build !unix

package lock

import (
	"errors"
	"os"
)

// tryFlock is unsupported here: without a kernel lock that the holder keeps
// until it dies, one writer cannot be guaranteed.
func tryFlock(*os.File) (bool, error) {
	return false, errors.New("lock: needs flock(2), unsupported on this platform")
}

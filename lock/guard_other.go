//go:build !unix

package lock

import (
	"errors"
	"os"
)

// tryFlock is unsupported here: without an exclusive kernel lock, reclaim,
// heartbeat and release cannot be made race-free.
func tryFlock(*os.File) (bool, error) {
	return false, errors.New("lock: reclaim guard needs flock(2), unsupported on this platform")
}

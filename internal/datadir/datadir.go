// Package datadir resolves belay's data directory: --data if given, else
// $BELAY_HOME, else $XDG_STATE_HOME/belay, else ~/.local/state/belay.
package datadir

import (
	"errors"
	"os"
	"path/filepath"
)

// Resolve returns the data directory. flag is the --data value ("" if unset);
// getenv looks up environment variables (os.Getenv if nil).
func Resolve(flag string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch {
	case flag != "":
		return filepath.Abs(flag)
	case getenv("BELAY_HOME") != "":
		return filepath.Abs(getenv("BELAY_HOME"))
	case getenv("XDG_STATE_HOME") != "":
		return filepath.Join(getenv("XDG_STATE_HOME"), "belay"), nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil || home == "" {
			return "", errors.New("datadir: cannot find a data directory: set BELAY_HOME or pass --data")
		}
	}
	return filepath.Join(home, ".local", "state", "belay"), nil
}

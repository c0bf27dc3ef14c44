//go:build !linux

package fsstore

import "errors"

func syncfsFunc(string) (func() error, func() error, error) {
	return nil, nil, errors.New("fsstore: sync mode \"filesystem\" needs Linux's syncfs(2)")
}

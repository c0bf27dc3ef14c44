//go:build !linux

package vfs

import "os"

func datasync(f *os.File) error { return f.Sync() }

func startWriteback(*os.File, int64, int64) error { return nil }

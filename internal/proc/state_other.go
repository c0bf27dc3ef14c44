//go:build !linux

package proc

// ProcessState is unknown on this platform.
func ProcessState(int) State { return StateUnknown }

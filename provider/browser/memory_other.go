//go:build !linux

package browser

// memory is not measured on this system.
func (c *chrome) memory() int64 { return 0 }

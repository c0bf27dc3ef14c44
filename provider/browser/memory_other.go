//go:build !linux

package browser

// memory is not measured on this system.
func (c *chrome) memory() int64 { return 0 }

// ProfileMemory is not measured on this system.
func ProfileMemory(root string) map[string]int64 { return map[string]int64{} }

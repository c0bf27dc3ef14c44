package cli

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
)

// Every command is in the tree once: `belay --help` lists each once, and
// a name added twice would shadow one of them.
func TestCommandsAreUnique(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(Stdio{In: &out, Out: &out, Err: &out, Getenv: func(string) string { return "" }})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		seen := map[string]bool{}
		for _, sub := range c.Commands() {
			if seen[sub.Name()] {
				t.Errorf("%s has the command %q twice", c.CommandPath(), sub.Name())
			}
			seen[sub.Name()] = true
			walk(sub)
		}
	}
	walk(root)
}

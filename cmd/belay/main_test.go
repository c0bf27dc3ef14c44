package main

import (
	"context"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/belayhq/belay/internal/cli"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"belay": func() {
			os.Exit(cli.Main(context.Background(), os.Args, cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
		},
	})
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real binary.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("BELAY_HOME", env.WorkDir+"/home")
			return nil
		},
	})
}

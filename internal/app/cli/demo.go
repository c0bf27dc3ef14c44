package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store/fsstore"
)

type demoOptions struct {
	globalOptions
	Keep bool
}

// demoScript is a fake run that streams for about four seconds.
const demoScript = `{"reply":"Durable sessions catch the falls: this answer was being written when the daemon was killed, and it picked up exactly where it left off.","tokens":40,"rate":10}`

func newDemoCmd(stdio Stdio) *cobra.Command {
	var opts demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show belay's main job: a run sent, watched, surviving a daemon crash, and read back",
		Long: `Runs the whole story on the embedded store with the fake provider, in a
fresh data directory (or --data): it starts a daemon, sends a run that
streams for a few seconds, watches it, kills the daemon with SIGKILL in the
middle, watches again (a new daemon starts, reclaims the run and resumes
it), reads the answer back, asks doctor what to do next, and stops the
daemon.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), stdio, opts) },
	}
	cmd.Flags().StringVar(&opts.Data, "data", "", "data directory (default: a new temporary one)")
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "keep the temporary data directory")
	return cmd
}

func runDemo(ctx context.Context, stdio Stdio, opts demoOptions) error {
	say := func(format string, args ...any) { fmt.Fprintf(stdio.Out, "\n==> "+format+"\n", args...) }
	if opts.Data == "" {
		dir, err := os.MkdirTemp("", "belay-demo-")
		if err != nil {
			return err
		}
		opts.Data = dir
		if !opts.Keep {
			defer os.RemoveAll(dir)
		}
	}
	say("starting a daemon on %s", opts.Data)
	c, err := connect(ctx, stdio, opts.globalOptions, true)
	if err != nil {
		return err
	}
	run, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "Why does belay exist?", Script: []byte(demoScript)}, "")
	if err != nil {
		return apiError(err)
	}
	say("sent run %s (belay send --provider fake ...); watching it for 1.5s", run.ID)
	_ = watchRun(ctx, stdio, c, run.Run, watchOptions{Timeout: 1500 * time.Millisecond, Progress: true})

	pid := 0
	if st, err := lock.Inspect(filepath.Join(opts.Data, fsstore.LockName), lock.Options{}); err == nil && st.Holder != nil {
		pid = st.Holder.PID
	}
	if pid == 0 {
		return fmt.Errorf("demo: cannot find the daemon's pid")
	}
	say("killing the daemon (pid %d) with SIGKILL, mid-answer", pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}

	say("watching again: a new daemon starts, reclaims the run and resumes it")
	c, err = connect(ctx, stdio, opts.globalOptions, true)
	if err != nil {
		return err
	}
	if err := watchRun(ctx, stdio, c, run.Run, watchOptions{Timeout: time.Minute, Progress: true}); err != nil {
		return err
	}

	say("reading it back (belay read %s)", run.ID)
	if err := newReadCmdRun(ctx, stdio, opts.globalOptions, run.ID); err != nil {
		return err
	}
	rep, err := c.Doctor(ctx, run.Session)
	if err != nil {
		return apiError(err)
	}
	say("doctor says: %s: %s", rep.NextAction, rep.Reason)
	if rep.Command != "" {
		fmt.Fprintf(stdio.Out, "    %s\n", rep.Command)
	}
	say("stopping the daemon")
	if st, err := lock.Inspect(filepath.Join(opts.Data, fsstore.LockName), lock.Options{}); err == nil && st.Holder != nil && !st.Stale {
		_ = syscall.Kill(st.Holder.PID, syscall.SIGTERM)
		for i := 0; i < 500 && syscall.Kill(st.Holder.PID, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Fprintln(stdio.Out, "\nThat is belay: the run outlived the process that was running it.")
	return nil
}

// newReadCmdRun prints a run's answer as `belay read RUN` does.
func newReadCmdRun(ctx context.Context, stdio Stdio, g globalOptions, id string) error {
	cmd := newReadCmd(stdio)
	cmd.SetArgs([]string{"--data", g.Data, id})
	cmd.SetOut(stdio.Out)
	cmd.SetErr(stdio.Err)
	return cmd.ExecuteContext(ctx)
}

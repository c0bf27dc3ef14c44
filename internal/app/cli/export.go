package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/transcript"
)

// exportOptions are `belay sessions export`'s.
type exportOptions struct {
	globalOptions
	Session string
	Format  string
	Output  string // "" or "-": standard output
}

func newSessionsExportCmd(stdio Stdio) *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export SESSION",
		Short: "Export a session's transcript in a format",
		Args:  exactArgs(1, "belay sessions export ses_... --format belay"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sessionArg(args); err != nil {
				return err
			}
			o.Session = args[0]
			return runExport(cmd.Context(), stdio, o)
		},
	}
	cmd.Flags().StringVar(&o.Data, "data", "", dataFlagHelp)
	cmd.Flags().StringVar(&o.Format, "format", "belay", "transcript format: belay, pi, claude, openai or anthropic")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "write to this new file instead of standard output")
	return cmd
}

// runExport streams the transcript from the daemon to standard output or
// to a new file, which appears only once the export is whole. What the
// export changed to fit the format goes to standard error.
func runExport(ctx context.Context, stdio Stdio, o exportOptions) error {
	toFile := o.Output != "" && o.Output != "-"
	if toFile {
		if err := checkNewOutput(o.Output); err != nil {
			return err
		}
	}
	c, err := connect(ctx, stdio, o.globalOptions, true)
	if err != nil {
		return err
	}
	export := func(w io.Writer) error {
		cw := &countWriter{w: w}
		sum, err := c.Transcript(ctx, o.Session, o.Format, cw)
		printExportNotes(stdio.Err, sum, o.Format)
		var ce *client.Error
		damaged := errors.As(err, &ce) && ce.Code == apitype.CodeReadOnly
		switch {
		case err != nil && cw.n > 0:
			what := "what was written is incomplete"
			if toFile {
				what = o.Output + " was not written"
			}
			return fmt.Errorf("export of %s stopped after %d bytes: %w; %s. Next: belay sessions doctor %s", o.Session, cw.n, err, what, o.Session)
		case damaged:
			return fmt.Errorf("export of %s: %w. Next: belay sessions doctor %s", o.Session, err, o.Session)
		}
		return err
	}
	if !toFile {
		return apiError(export(stdio.Out))
	}
	return apiError(writeOutput(o.Output, export))
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// printExportNotes says on w how many changes of each kind the export
// made, with the reason of the first.
func printExportNotes(w io.Writer, sum transcript.ExportSummary, format string) {
	if sum.Total() == 0 {
		return
	}
	things := "things"
	if sum.Total() == 1 {
		things = "thing"
	}
	fmt.Fprintf(w, "belay: the export changed %d %s to fit the %s format:\n", sum.Total(), things, format)
	kinds := make([]string, 0, len(sum.Counts))
	for k := range sum.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		why := ""
		for _, c := range sum.Changes {
			if c.Kind == k {
				why = ": " + c.Reason
				break
			}
		}
		fmt.Fprintf(w, "  %d %s%s\n", sum.Counts[k], k, why)
	}
}

// checkNewOutput refuses -o FILE when FILE is an existing regular file
// (belay never overwrites one); a device or pipe such as /dev/null is
// written to.
func checkNewOutput(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().IsRegular() || fi.IsDir():
		return fmt.Errorf("%s exists; belay does not overwrite it: give a new file name", path)
	}
	return nil
}

// writeOutput runs write on -o FILE. A device or pipe is written to as it
// is; a new file is written beside it under a temporary name and linked
// to its name only when write succeeded (an existing file is never
// replaced), so a failed export leaves no partial file behind.
func writeOutput(path string, write func(io.Writer) error) error {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		werr := write(f)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		return werr
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists; belay does not overwrite it: give a new file name", path)
		}
		return err
	}
	return nil
}

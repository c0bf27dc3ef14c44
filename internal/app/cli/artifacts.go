package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/provider/browser"
)

// artifactsResult is `belay read RUN --artifacts --json`.
type artifactsResult struct {
	Run     string `json:"run"`
	Session string `json:"session"`
	Dir     string `json:"dir"`
	// Answer is the final answer as the site gave it (answer.md).
	Answer    *browser.Answer    `json:"answer,omitempty"`
	Artifacts []browser.Artifact `json:"artifacts"`
}

// printArtifacts lists the files a run downloaded (the browser provider's
// manifest in <data>/sessions/<session>/artifacts/<run>).
func printArtifacts(stdio Stdio, g globalOptions, run belay.Run) error {
	dataDir, err := g.dataDir(stdio)
	if err != nil {
		return err
	}
	dir := daemon.ArtifactDir(dataDir, run.Session, run.ID)
	res := artifactsResult{Run: run.ID, Session: run.Session, Dir: dir, Artifacts: []browser.Artifact{}}
	m, err := browser.ReadManifest(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		res.Answer, res.Artifacts = m.Answer, m.Artifacts
	}
	if g.JSON {
		return writeJSON(stdio.Out, res)
	}
	if a := res.Answer; a != nil {
		how := "from the site's copy button"
		if a.Source != browser.SourceCopy {
			how = "the page's text (" + a.Note + ")"
		}
		fmt.Fprintf(stdio.Out, "%s  %10d  %-24s  %s\n", a.SHA256[:16], a.Size, "answer, "+a.Source, filepath.Join(dir, a.File))
		fmt.Fprintf(stdio.Err, "belay: the answer file is %s\n", how)
	}
	if len(res.Artifacts) == 0 {
		if res.Answer == nil {
			fmt.Fprintf(stdio.Err, "belay: run %s has no artifacts\n", run.ID)
		}
		return nil
	}
	failed := 0
	for _, a := range res.Artifacts {
		if a.Error != "" {
			failed++
			fmt.Fprintf(stdio.Out, "FAILED  %-24s %s (after %d attempts)\n", a.Name, a.Error, a.Attempts)
			continue
		}
		fmt.Fprintf(stdio.Out, "%s  %10d  %-24s  %s\n", a.SHA256[:16], a.Size, a.Type, filepath.Join(dir, a.File))
	}
	if failed > 0 {
		return &exitError{code: ExitError, err: fmt.Errorf("%d of %d artifacts could not be downloaded", failed, len(res.Artifacts))}
	}
	return nil
}

package cli

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/api"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/doctor"
	"github.com/belayhq/belay/lock"
	brt "github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
)

// source is where read-only commands read from: the daemon, or the files
// when it is down.
type source interface {
	run(ctx context.Context, id string) (belay.Run, error)
	runs(ctx context.Context, session string) ([]belay.Run, error)
	session(ctx context.Context, id string) (belay.Session, error)
	sessions(ctx context.Context, f belay.SessionFilter) ([]belay.Session, error)
	events(ctx context.Context, session string, after uint64, limit int) ([]belay.Event, error)
	doctor(ctx context.Context, session string) (apitype.DoctorReport, error)
	listRuns(ctx context.Context, q apitype.RunQuery) (apitype.RunPage, error)
	inbox(ctx context.Context, session string) ([]belay.Delivery, error)
	// answer writes a run's answer text to w, streamed (G14: it fails if
	// the answer is not whole).
	answer(ctx context.Context, run belay.Run, w io.Writer) error
	close()
}

// openSource connects to the daemon without starting one; if none answers
// it opens the files read-only and says so.
func openSource(ctx context.Context, stdio Stdio, g globalOptions) (source, error) {
	c, err := connect(ctx, stdio, g, false)
	if err == nil {
		return onlineSource{c}, nil
	}
	var ee *exitError
	if !(asExit(err, &ee) && ee.code == ExitUnreachable) || stdio.Getenv("BELAY_URL") != "" {
		return nil, err
	}
	st, err := openOffline(ctx, stdio, g)
	if err != nil {
		return nil, err
	}
	offlineNote(stdio, st)
	dir, _ := g.dataDir(stdio)
	return offlineSource{st: st, dir: dir}, nil
}

type onlineSource struct{ c *client.Client }

func (s onlineSource) run(ctx context.Context, id string) (belay.Run, error) {
	r, err := s.c.Run(ctx, id)
	return r.Run, apiError(err)
}

func (s onlineSource) runs(ctx context.Context, session string) ([]belay.Run, error) {
	rs, err := s.c.Runs(ctx, session)
	out := make([]belay.Run, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Run)
	}
	return out, apiError(err)
}

func (s onlineSource) session(ctx context.Context, id string) (belay.Session, error) {
	sess, err := s.c.Session(ctx, id)
	return sess, apiError(err)
}

func (s onlineSource) sessions(ctx context.Context, f belay.SessionFilter) ([]belay.Session, error) {
	l, err := s.c.Sessions(ctx, f)
	return l, apiError(err)
}

func (s onlineSource) events(ctx context.Context, session string, after uint64, limit int) ([]belay.Event, error) {
	l, err := s.c.Events(ctx, session, after, limit, 0)
	return l.Events, apiError(err)
}

func (s onlineSource) doctor(ctx context.Context, session string) (apitype.DoctorReport, error) {
	r, err := s.c.Doctor(ctx, session)
	return r, apiError(err)
}

func (s onlineSource) listRuns(ctx context.Context, q apitype.RunQuery) (apitype.RunPage, error) {
	p, err := s.c.ListRuns(ctx, q)
	return p, apiError(err)
}

func (s onlineSource) inbox(ctx context.Context, session string) ([]belay.Delivery, error) {
	ds, err := s.c.Inbox(ctx, session, "")
	return ds, apiError(err)

}

func (s onlineSource) answer(ctx context.Context, run belay.Run, w io.Writer) error {
	return apiError(s.c.Answer(ctx, run.ID, w))
}

func (onlineSource) close() {}

type offlineSource struct {
	st  store.Store
	dir string
}

func (s offlineSource) run(ctx context.Context, id string) (belay.Run, error) {
	return s.st.Run(ctx, id)
}
func (s offlineSource) runs(ctx context.Context, session string) ([]belay.Run, error) {
	return s.st.Runs(ctx, belay.RunFilter{Session: session})
}
func (s offlineSource) session(ctx context.Context, id string) (belay.Session, error) {
	return s.st.Session(ctx, id)
}
func (s offlineSource) sessions(ctx context.Context, f belay.SessionFilter) ([]belay.Session, error) {
	return s.st.Sessions(ctx, f)
}
func (s offlineSource) events(ctx context.Context, session string, after uint64, limit int) ([]belay.Event, error) {
	return s.st.Events(ctx, session, after, limit)
}

func (s offlineSource) doctor(ctx context.Context, session string) (apitype.DoctorReport, error) {
	in, err := brt.DoctorInput(ctx, s.st, session)
	if err != nil {
		return apitype.DoctorReport{}, err
	}
	in.Now, in.Offline = time.Now(), true
	if ls, err := lock.Inspect(filepath.Join(s.dir, fsstore.LockName), lock.Options{}); err == nil {
		in.Daemon.Lock = &ls
	}
	return doctor.Diagnose(in), nil
}

// listRuns pages the store's runs as GET /v1/runs does.
func (s offlineSource) listRuns(ctx context.Context, q apitype.RunQuery) (apitype.RunPage, error) {
	page, next, err := api.ListRuns(ctx, s.st, q)
	if err != nil {
		return apitype.RunPage{}, err
	}
	out := apitype.RunPage{Runs: make([]apitype.Run, 0, len(page)), NextCursor: next}
	for _, r := range page {
		out.Runs = append(out.Runs, apitype.Run{Run: r})
	}
	return out, nil
}

func (s offlineSource) inbox(ctx context.Context, session string) ([]belay.Delivery, error) {
	return s.st.Deliveries(ctx, belay.DeliveryFilter{Session: session})

}

func (s offlineSource) answer(ctx context.Context, run belay.Run, w io.Writer) error {
	return brt.WriteAnswer(ctx, s.st, run, w)
}

func (s offlineSource) close() { _ = s.st.Close() }

// promptOf returns the prompt of a run from its run.created event.
func promptOf(evs []belay.Event, run string) string {
	for _, e := range evs {
		if e.Type == belay.EventRunCreated && e.Run == run {
			var d struct {
				Input belay.InputData `json:"input"`
			}
			_ = json.Unmarshal(e.Data, &d)
			return d.Input.Prompt
		}
	}
	return ""
}

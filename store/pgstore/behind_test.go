package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/store/pgstore"
)

// leasedRun creates a session with a run and leases it to owner.
func leasedRun(t *testing.T, s *pgstore.Store) (belay.Session, belay.Run) {
	t.Helper()
	ctx := context.Background()
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	run, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"hi"}`)})
	require.NoError(t, err)
	run, err = s.AcquireRunLease(ctx, run.ID, "owner", time.Minute, 0)
	require.NoError(t, err)
	return sess, run
}

// runText is a run.text event of run's lease.
func runText(run belay.Run, x string) belay.Event {
	return belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: json.RawMessage(`{"text":"` + x + `"}`)}
}

// kinds lists a session's events from seq after as "type" or
// "run.updated:phase" or "run.text:text", checking their seqs have no gap.
func kinds(t *testing.T, s store.Store, session string, after uint64) []string {
	t.Helper()
	evs, err := s.Events(context.Background(), session, after, 0)
	require.NoError(t, err)
	var out []string
	for i, e := range evs {
		require.Equal(t, after+uint64(i)+1, e.Seq, "seqs without a gap")
		switch e.Type {
		case belay.EventRunUpdated:
			var d belay.RunUpdatedData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			out = append(out, e.Type+":"+string(d.Phase))
		case belay.EventRunText:
			var d belay.TextData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			out = append(out, e.Type+":"+d.Text)
		default:
			out = append(out, e.Type)
		}
	}
	return out
}

// TestWriteBehindRidesOnTheNextWrite: queued writes are committed, in
// order and before it, by the session's next write; the run's row takes
// the last phase queued.
func TestWriteBehindRidesOnTheNextWrite(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	sess, run := leasedRun(t, s)
	base := run.InputSeq + 1 // run.created, then run.leased
	text := func(x string) belay.Event { return runText(run, x) }
	require.NoError(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}))
	require.NoError(t, s.AppendBehind(sess.ID, text("a"), text("b")))
	require.NoError(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true, Data: json.RawMessage(`{"stopReason":"end_turn"}`)}))
	// The next write (a synced append) commits them first.
	seqs, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "app.note", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, []string{"run.updated:streaming", "run.text:a", "run.text:b", "run.updated:finishing", "app.note"}, kinds(t, s, sess.ID, base))
	require.Equal(t, []uint64{base + 5}, seqs)
	got, err := s.Run(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseFinishing, got.Phase)
	require.Equal(t, belay.RunRunning, got.Status)

	// An update of the run commits the queue before its own event.
	require.NoError(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}))
	done, err := s.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, done.Status)
	require.Equal(t, []string{"run.updated:streaming", "run.updated:complete"}, kinds(t, s, sess.ID, base+5))
}

// TestWriteBehindCarriedByTheNextWrite: the session's next write commits
// the queue in its own transaction. An update of the run that sets its
// phase updates its row once for both; a write that refuses leaves the
// queue committed; a write that leaves the phase finds (and returns) the
// run at the queued phase.
func TestWriteBehindCarriedByTheNextWrite(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	// Every update of a run's row is counted, with its transaction.
	_, err := s.Pool().Exec(ctx, `CREATE TABLE run_updates (run text, xid xid8);
		CREATE FUNCTION count_run_update() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO run_updates VALUES (NEW.id, pg_current_xact_id()); RETURN NEW; END $$;
		CREATE TRIGGER count_run_update BEFORE UPDATE ON belay_runs FOR EACH ROW EXECUTE FUNCTION count_run_update()`)
	require.NoError(t, err)
	sess, run := leasedRun(t, s)
	base := run.InputSeq + 1
	text := func(x string) belay.Event { return runText(run, x) }
	// xids returns the distinct transactions of the session's events
	// after seq after.
	xids := func(after uint64) int {
		var n int
		require.NoError(t, s.Pool().QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM belay_events WHERE session = $1 AND seq > $2`, sess.ID, int64(after)).Scan(&n))
		return n
	}
	updates := func() int {
		var n int
		require.NoError(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM run_updates WHERE run = $1`, run.ID).Scan(&n))
		return n
	}

	// A write that leaves the phase: the run is returned at the queued one.
	require.NoError(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}))
	require.NoError(t, s.AppendBehind(sess.ID, text("a")))
	renewed, err := s.RenewRunLease(ctx, run.ID, run.Epoch, time.Minute, nil)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseStreaming, renewed.Phase)
	require.Equal(t, []string{"run.updated:streaming", "run.text:a", "run.renewed"}, kinds(t, s, sess.ID, base))
	require.Equal(t, 1, xids(base), "one transaction")
	base += 3

	// A write that refuses: the queue commits all the same.
	require.NoError(t, s.AppendBehind(sess.ID, text("b")))
	_, err = s.RenewRunLease(ctx, run.ID, run.Epoch+1, time.Minute, nil)
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	require.Equal(t, []string{"run.text:b"}, kinds(t, s, sess.ID, base))
	base++

	// The run's own update: one transaction, one update of its row.
	require.NoError(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true}))
	require.NoError(t, s.AppendBehind(sess.ID, text("c")))
	before := updates()
	// Without a phase of its own the update keeps the queued one.
	got, err := s.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Data: json.RawMessage(`{"note":1}`)})
	require.NoError(t, err)
	require.Equal(t, belay.PhaseFinishing, got.Phase)
	require.Equal(t, before+1, updates(), "the queued phase and the update are one update of the row")
	done, err := s.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, done.Status)
	require.Equal(t, []string{"run.updated:finishing", "run.text:c", "run.updated:", "run.updated:complete"}, kinds(t, s, sess.ID, base))
	require.Equal(t, 2, xids(base))
	stored, err := s.Run(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseComplete, stored.Phase)
}

// TestWriteBehindCarrierGivesUp: a write that carries the queue and
// whose caller gives up mid-commit is carried out all the same, so the
// queue is not lost and the run's lease goes on.
func TestWriteBehindCarrierGivesUp(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	_, err := s.Pool().Exec(ctx, `CREATE FUNCTION slow_note() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.type = 'app.slow' THEN PERFORM pg_sleep(0.5); END IF; RETURN NEW; END $$;
		CREATE TRIGGER slow_note BEFORE INSERT ON belay_events FOR EACH ROW EXECUTE FUNCTION slow_note()`)
	require.NoError(t, err)
	sess, run := leasedRun(t, s)
	base := run.InputSeq + 1
	require.NoError(t, s.AppendBehind(sess.ID, runText(run, "kept")))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s.Append(short, sess.ID, belay.Sync, belay.Event{Type: "app.slow", Data: json.RawMessage(`{}`)})
	require.NoError(t, err, "carried out past its caller's deadline")
	_, err = s.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err, "the lease was not failed")
	require.Equal(t, []string{"run.text:kept", "app.slow", "run.updated:complete"}, kinds(t, s, sess.ID, base))
}

// TestWriteBehindCommitsAlone: with no other write to the session, a
// queue is committed by itself, soon.
func TestWriteBehindCommitsAlone(t *testing.T) {
	s := open(t, database(t), nil)
	defer s.Close()
	sess, run := leasedRun(t, s)
	require.NoError(t, s.AppendBehind(sess.ID, belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: json.RawMessage(`{"text":"x"}`)}))
	require.Eventually(t, func() bool {
		evs, err := s.Events(context.Background(), sess.ID, run.InputSeq+1, 0)
		return err == nil && len(evs) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"run.text:x"}, kinds(t, s, sess.ID, run.InputSeq+1))
}

// TestWriteBehindRefusesAStaleLease: a queued write of a lease taken over
// is dropped when its queue commits, leaves the writes of the current
// lease in the same queue alone, and fails the stale lease's next write.
func TestWriteBehindRefusesAStaleLease(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	sess, old := leasedRun(t, s)
	cur, err := s.AcquireRunLease(ctx, old.ID, "rescuer", time.Minute, old.Epoch)
	require.NoError(t, err)
	base := cur.InputSeq + 2
	require.NoError(t, s.AppendBehind(sess.ID, runText(old, "stale")))
	require.NoError(t, s.AppendBehind(sess.ID, runText(cur, "current")))
	require.NoError(t, s.UpdateRunBehind(sess.ID, old.ID, old.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}))
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "app.note", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, []string{"run.text:current", "app.note"}, kinds(t, s, sess.ID, base))
	got, err := s.Run(ctx, cur.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseAdmitted, got.Phase, "the stale lease's phase is not applied")
	// The stale lease's next write is told, once; the store's own check
	// refuses it after that.
	err = s.AppendBehind(sess.ID, runText(old, "again"))
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	_, err = s.UpdateRun(ctx, old.ID, old.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	require.NoError(t, s.AppendBehind(sess.ID, runText(cur, "more")))
}

// TestWriteBehindFailedCommit: a queue whose commit the database refuses
// is dropped whole; another writer of the session goes on after it; the
// lease is told at its next write and stays failed, writing nothing more
// (so nothing it journals follows the gap), until the run is leased again.
func TestWriteBehindFailedCommit(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	_, err := s.Pool().Exec(ctx, `CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.type = 'run.text' AND NEW.data::text LIKE '%boom%' THEN RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_boom BEFORE INSERT ON belay_events FOR EACH ROW EXECUTE FUNCTION refuse_boom()`)
	require.NoError(t, err)
	sess, run := leasedRun(t, s)
	base := run.InputSeq + 1
	text := func(x string) belay.Event { return runText(run, x) }
	require.NoError(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}))
	require.NoError(t, s.AppendBehind(sess.ID, text("boom")))
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "app.note", Data: json.RawMessage(`{}`)})
	require.NoError(t, err, "another writer goes on after the failed queue")
	require.Equal(t, []string{"app.note"}, kinds(t, s, sess.ID, base))
	_, err = s.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing})
	require.ErrorContains(t, err, "boom refused", "the lease's next write is told")
	_, err = s.Append(ctx, sess.ID, belay.Sync, text("after"))
	require.ErrorContains(t, err, "boom refused", "and every one after it")
	require.ErrorContains(t, s.AppendBehind(sess.ID, text("after")), "boom refused")
	require.Equal(t, []string{"app.note"}, kinds(t, s, sess.ID, base), "nothing of the lease follows the gap")

	// Re-leased (as a stalled runner's retry does), the run writes again.
	again, err := s.AcquireRunLease(ctx, run.ID, "owner", time.Minute, run.Epoch)
	require.NoError(t, err)
	_, err = s.UpdateRun(ctx, run.ID, again.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing})
	require.NoError(t, err)
	require.Equal(t, []string{"app.note", "run.leased", "run.updated:finishing"}, kinds(t, s, sess.ID, base))
}

// TestWriteBehindDropsWhatFollowsALoss: writes a lease queues while its
// failing queue commits are dropped with it, not committed after the gap.
func TestWriteBehindDropsWhatFollowsALoss(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	_, err := s.Pool().Exec(ctx, `CREATE FUNCTION slow_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.data::text LIKE '%boom%' THEN PERFORM pg_sleep(0.3); RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER slow_boom BEFORE INSERT ON belay_events FOR EACH ROW EXECUTE FUNCTION slow_boom()`)
	require.NoError(t, err)
	sess, run := leasedRun(t, s)
	text := func(x string) belay.Event { return runText(run, x) }
	require.NoError(t, s.AppendBehind(sess.ID, text("boom")))
	// Queued while the first queue commits (and fails), or before: either
	// way it must not be journaled after the lost write.
	var lateErr error
	require.Eventually(t, func() bool {
		lateErr = s.AppendBehind(sess.ID, text("late"))
		return lateErr != nil
	}, 10*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, lateErr, "boom refused")
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "app.note", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, []string{"app.note"}, kinds(t, s, sess.ID, run.InputSeq+1))
}

// TestWriteBehindCloseCommits: Close commits what is queued; a closed
// store queues nothing.
func TestWriteBehindCloseCommits(t *testing.T) {
	url := database(t)
	s := open(t, url, nil)
	sess, run := leasedRun(t, s)
	require.NoError(t, s.AppendBehind(sess.ID, belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: json.RawMessage(`{"text":"kept"}`)}))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.AppendBehind(sess.ID, belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: json.RawMessage(`{}`)}), belay.ErrStoreClosed)
	again := open(t, url, nil)
	defer again.Close()
	require.Equal(t, []string{"run.text:kept"}, kinds(t, again, sess.ID, run.InputSeq+1))
}

// TestWriteBehindRefusesWhatItDoesNotQueue: only a running phase and its
// data, and events of one lease without ids, are queued.
func TestWriteBehindRefusesWhatItDoesNotQueue(t *testing.T) {
	s := open(t, database(t), nil)
	defer s.Close()
	sess, run := leasedRun(t, s)
	for name, u := range map[string]belay.RunUpdate{
		"terminal": {Phase: belay.PhaseComplete},
		"no phase": {Data: json.RawMessage(`{}`)},
		"error":    {Phase: belay.PhaseStreaming, Error: &belay.RunError{Class: belay.ClassInternal}},
		"ref":      {Phase: belay.PhaseStreaming, Ref: &belay.ConversationRef{ID: "x"}},
		"bad data": {Phase: belay.PhaseStreaming, Data: json.RawMessage(`{`)},
	} {
		require.ErrorIs(t, s.UpdateRunBehind(sess.ID, run.ID, run.Epoch, u), belay.ErrInvalid, name)
	}
	require.ErrorIs(t, s.UpdateRunBehind(sess.ID, run.ID, 0, belay.RunUpdate{Phase: belay.PhaseStreaming}), belay.ErrInvalid, "epoch 0")
	ok := belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: json.RawMessage(`{"text":"x"}`)}
	for name, e := range map[string]belay.Event{
		"no run":      {Type: belay.EventRunText, Epoch: run.Epoch, Data: ok.Data},
		"no epoch":    {Type: belay.EventRunText, Run: run.ID, Data: ok.Data},
		"an id":       {Type: belay.EventRunText, ID: "x", Run: run.ID, Epoch: run.Epoch, Data: ok.Data},
		"store event": {Type: belay.EventRunUpdated, Run: run.ID, Epoch: run.Epoch, Data: ok.Data},
		"too large":   {Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: json.RawMessage(`"` + strings.Repeat("x", belay.MaxRecordSize) + `"`)},
		"other epoch": {Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch + 1, Data: ok.Data},
	} {
		require.ErrorIs(t, s.AppendBehind(sess.ID, ok, e), belay.ErrInvalid, name)
	}
	require.Empty(t, kinds(t, s, sess.ID, run.InputSeq+1), "nothing refused was queued")
}

// TestWriteBehindJournalsWhatTheFileStoreDoes: a run with streamed
// thinking and text, usage and a tool call leaves the same events, in the
// same order, on PostgreSQL (where its buffered writes are queued) as in
// the file store (where they are written at once).
func TestWriteBehindJournalsWhatTheFileStoreDoes(t *testing.T) {
	ctx := context.Background()
	reply := "one two three four five six seven"
	script := &fake.Script{Reply: &reply, Thinking: "let me think", UsageEvery: 3,
		Steps: []fake.Step{{Kind: fake.StepTool, At: 3, Tool: "lookup", SideEffect: true}}}
	journal := func(st store.Store) []string {
		rt, err := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{Name: "fake", Script: script})}, PruneEvery: -1})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		defer func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			require.NoError(t, rt.Stop(sctx))
		}()
		run, err := rt.Submit(ctx, runtime.SubmitRequest{Provider: "fake", Prompt: "hi"})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done, err := rt.Wait(wctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, done.Status, done.Reason)
		return kinds(t, st, run.Session, 0)
	}
	fs, err := fsstore.Open(ctx, t.TempDir(), fsstore.Options{})
	require.NoError(t, err)
	defer fs.Close()
	pg := open(t, database(t), nil)
	defer pg.Close()
	want := journal(fs)
	require.Contains(t, want, "run.text:one ")
	require.Contains(t, want, "run.usage")
	require.Equal(t, want, journal(pg))
}

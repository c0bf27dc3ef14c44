package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
)

// receiver is a webhook receiver on loopback: it counts the requests per
// webhook-id and fails the first fail of them.
type receiver struct {
	mu    sync.Mutex
	fail  int
	calls int
	ids   map[string]int
	srv   *httptest.Server
}

func newReceiver(t *testing.T, fail int) *receiver {
	rc := &receiver{fail: fail, ids: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			Type string         `json:"type"`
			Data belay.Delivery `json:"data"`
		}
		if err := json.Unmarshal(body, &msg); err != nil || msg.Data.ID == "" || msg.Type != msg.Data.Type {
			t.Errorf("bad body %q: %v", body, err)
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.calls++
		if rc.fail > 0 {
			rc.fail--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rc.ids[r.Header.Get("webhook-id")]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) stats() (calls int, ids map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ids = map[string]int{}
	for k, v := range rc.ids {
		ids[k] = v
	}
	return rc.calls, ids
}

// target posts to the receiver.
func (rc *receiver) target(name string) NotifyTarget {
	return NotifyTarget{
		NotificationTarget: store.NotificationTarget{Name: name, Types: []string{"ping"}},
		Send: func(ctx context.Context, n Notice) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, rc.srv.URL, bytes.NewReader(n.Body))
			if err != nil {
				return err
			}
			req.Header.Set("webhook-id", n.ID)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			return nil
		},
	}
}

// ping posts a "ping" item in a new session through the runtime.
func (b *bundle) ping() belay.Delivery {
	b.t.Helper()
	ctx := context.Background()
	sess, err := b.st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(b.t, err)
	d, _, err := b.rt.Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ping"})
	require.NoError(b.t, err)
	return d
}

func notification(t *testing.T, st store.Store, delivery, target string) store.Notification {
	t.Helper()
	n, err := st.Notification(context.Background(), delivery, target)
	require.NoError(t, err)
	return n
}

// TestNotifyOnceAcrossRuntimes runs two runtimes over one store, posting
// through both and sweeping at the same moments: every notification is
// sent exactly once.
func TestNotifyOnceAcrossRuntimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st, err := fsstore.Open(ctx, t.TempDir(), fsstore.Options{Clock: clk})
	require.NoError(t, err)
	defer st.Close()
	rc := newReceiver(t, 0)
	var rts []*Runtime
	for i := 0; i < 2; i++ {
		rt, err := New(Options{Store: st, Clock: clk, PruneEvery: -1, Notify: []NotifyTarget{rc.target("hook")}, NotifySweep: time.Second})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		rts = append(rts, rt)
	}
	defer func() {
		for _, rt := range rts {
			require.NoError(t, rt.Stop(ctx))
		}
	}()
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	const n = 40
	var ids []string
	for i := 0; i < n; i++ {
		d, created, err := rts[i%2].Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ping", Key: fmt.Sprint(i)})
		require.NoError(t, err)
		require.True(t, created)
		ids = append(ids, d.ID)
		_, _, err = rts[i%2].Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "other", Key: fmt.Sprint(i)})
		require.NoError(t, err)
		if i%8 == 0 {
			clk.Advance(time.Second) // both sweep at once
		}
	}
	require.Eventually(t, func() bool {
		clk.Advance(time.Second)
		for _, id := range ids {
			if notification(t, st, id, "hook").State != store.NotifySent {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond)
	// Settled as sent: nothing is sent again, whatever sweeps follow.
	clk.Advance(time.Minute)
	calls, got := rc.stats()
	require.Len(t, got, n)
	for _, id := range ids {
		require.Equal(t, 1, got[NotificationID(id, "hook")], id)
		require.Equal(t, 1, notification(t, st, id, "hook").Attempts)
	}
	require.Equal(t, n, calls)
	// Both runtimes sent some: the claims raced.
	evs, err := st.Events(ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	owners := map[string]int{}
	for _, e := range evs {
		if e.Type == belay.EventNotifyClaimed {
			var c struct{ Owner string }
			require.NoError(t, json.Unmarshal(e.Data, &c))
			owners[c.Owner]++
		}
	}
	require.Len(t, owners, 2, "claims by owner: %v", owners)
}

// TestNotifyRetrySurvivesRestart fails the first two attempts: each is
// retried after its backoff on the injected clock, and the schedule and
// attempt count survive a restart.
func TestNotifyRetrySurvivesRestart(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 2)
	b := setup(t, Options{Notify: []NotifyTarget{rc.target("hook")}})
	d := b.ping()

	pendingAt := func(at time.Time, attempts int) func() bool {
		return func() bool {
			n := notification(t, b.st, d.ID, "hook")
			return n.State == store.NotifyPending && n.Attempts == attempts && n.NotBefore.Equal(at)
		}
	}
	require.Eventually(t, pendingAt(t0.Add(time.Second), 1), 10*time.Second, 5*time.Millisecond)
	b.clk.Advance(time.Second)
	require.Eventually(t, pendingAt(t0.Add(3*time.Second), 2), 10*time.Second, 5*time.Millisecond)
	calls, _ := rc.stats()
	require.Equal(t, 2, calls)
	require.Equal(t, "HTTP 503", notification(t, b.st, d.ID, "hook").Error)

	b.restart()
	require.True(t, pendingAt(t0.Add(3*time.Second), 2)(), "the retry is scheduled as before the restart")
	b.clk.Advance(2 * time.Second)
	require.Eventually(t, func() bool { return notification(t, b.st, d.ID, "hook").State == store.NotifySent }, 10*time.Second, 5*time.Millisecond)
	calls, ids := rc.stats()
	require.Equal(t, 3, calls)
	require.Equal(t, map[string]int{NotificationID(d.ID, "hook"): 1}, ids)
	require.Equal(t, 3, notification(t, b.st, d.ID, "hook").Attempts)
}

// TestNotifyAbandoned gives up after the attempts run out.
func TestNotifyAbandoned(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 100)
	b := setup(t, Options{Notify: []NotifyTarget{rc.target("hook")}, NotifyAttempts: 2})
	d := b.ping()
	require.Eventually(t, func() bool {
		b.clk.Advance(time.Second)
		return notification(t, b.st, d.ID, "hook").State == store.NotifyAbandoned
	}, 10*time.Second, 5*time.Millisecond)
	n := notification(t, b.st, d.ID, "hook")
	require.Equal(t, 2, n.Attempts)
	require.Equal(t, "HTTP 503", n.Error)
	calls, _ := rc.stats()
	require.Equal(t, 2, calls)
}

func TestNotifyTargetsChecked(t *testing.T) {
	t.Parallel()
	st, err := fsstore.Open(context.Background(), t.TempDir(), fsstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	send := func(context.Context, Notice) error { return nil }
	for _, targets := range [][]NotifyTarget{
		{{Send: send}},
		{{NotificationTarget: store.NotificationTarget{Name: "a"}}},
		{{NotificationTarget: store.NotificationTarget{Name: "a"}, Send: send}, {NotificationTarget: store.NotificationTarget{Name: "a"}, Send: send}},
	} {
		_, err := New(Options{Store: st, Notify: targets})
		require.ErrorIs(t, err, belay.ErrInvalid)
	}
}

// TestNotifyStopFinishesAttempt stops the runtime while a webhook is
// being answered: the attempt finishes and is recorded as sent, so the
// next start does not send it again.
func TestNotifyStopFinishesAttempt(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.Header.Get("webhook-id"), new(int))
		*n.(*int)++
		if *n.(*int) == 1 {
			close(arrived)
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	rc := &receiver{srv: srv}
	b := setup(t, Options{Notify: []NotifyTarget{rc.target("hook")}})
	d := b.ping()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- b.rt.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while an attempt was in flight: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-stopped)
	b.rt = nil
	require.NoError(t, b.st.Close())
	b.start()
	require.Equal(t, store.NotifySent, notification(t, b.st, d.ID, "hook").State)
	b.clk.Advance(time.Hour)
	n, _ := calls.Load(NotificationID(d.ID, "hook"))
	require.Equal(t, 1, *n.(*int))
}

package fsstore

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/store"
)

// TestLegacyNotifySettled reads a journal written when the daemon's
// notifier journaled its own notify.* events (epoch 0): a settlement of
// then is final, so an upgrade does not send those notifications again.
func TestLegacyNotifySettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, Options{})
	require.NoError(t, err)
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	sent, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "run.completed", Key: "a"})
	require.NoError(t, err)
	failed, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "run.completed", Key: "b"})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	j, err := journal.Open(filepath.Join(dir, SessionsName, sess.ID), journal.Options{})
	require.NoError(t, err)
	legacy := func(typ string, v any) belay.Event {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		return belay.Event{Type: typ, TS: time.Now().UTC(), Data: raw}
	}
	_, err = j.Append(ctx, journal.Sync,
		legacy(belay.EventNotifyClaimed, map[string]any{"delivery": sent.ID, "target": "t", "attempt": 1}),
		legacy(belay.EventNotifySettled, map[string]any{"delivery": sent.ID, "target": "t", "ok": true, "status": 204, "attempt": 2}),
		legacy(belay.EventNotifyClaimed, map[string]any{"delivery": failed.ID, "target": "t", "attempt": 8}),
		legacy(belay.EventNotifySettled, map[string]any{"delivery": failed.ID, "target": "t", "error": "HTTP 500", "attempt": 8}))
	require.NoError(t, err)
	require.NoError(t, j.Close())

	s, err = Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer s.Close()
	n, err := s.Notification(ctx, sent.ID, "t")
	require.NoError(t, err)
	require.Equal(t, store.NotifySent, n.State)
	require.Equal(t, 2, n.Attempts)
	n, err = s.Notification(ctx, failed.ID, "t")
	require.NoError(t, err)
	require.Equal(t, store.NotifyAbandoned, n.State)
	require.Equal(t, "HTTP 500", n.Error)
	_, err = s.ClaimNotification(ctx, sent.ID, "t", "o", time.Minute)
	require.ErrorIs(t, err, belay.ErrTerminal)
	due, _, err := s.DueNotifications(ctx, store.NotificationTarget{Name: "t"}, 10)
	require.NoError(t, err)
	require.Empty(t, due)
}

// BenchmarkDueNotifications lists the due notifications of a store whose
// deliveries were all notified but a few: the listing reads the open ones,
// not every delivery. Deliveries (every delivery of every session, what
// the daemon's notifier polled every 250 ms before) is the baseline.
func BenchmarkDueNotifications(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, b.TempDir(), Options{})
	require.NoError(b, err)
	defer s.Close()
	const sessions, per, open = 40, 50, 5
	target := store.NotificationTarget{Name: "t", Types: []string{"run.completed"}}
	for i := 0; i < sessions; i++ {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		require.NoError(b, err)
		for j := 0; j < per; j++ {
			d, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "run.completed", Key: fmt.Sprint(j)})
			require.NoError(b, err)
			if i*per+j < open {
				continue
			}
			c, err := s.ClaimNotification(ctx, d.ID, target.Name, "o", time.Minute)
			require.NoError(b, err)
			_, err = s.SettleNotification(ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
			require.NoError(b, err)
		}
	}
	b.Run("due", func(b *testing.B) {
		for b.Loop() {
			due, _, err := s.DueNotifications(ctx, target, 64)
			if err != nil || len(due) != open {
				b.Fatal(len(due), err)
			}
		}
	})
	b.Run("all-deliveries", func(b *testing.B) {
		for b.Loop() {
			ds, err := s.Deliveries(ctx, belay.DeliveryFilter{})
			if err != nil || len(ds) != sessions*per {
				b.Fatal(len(ds), err)
			}
		}
	})
}

package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
)

// notifyTests are the notification claim tests (store.NotificationStore).
var notifyTests = map[string]func(t *testing.T, h Harness){
	"NotifyClaimSettle": testNotifyClaimSettle,
	"NotifyClaimExpiry": testNotifyClaimExpiry,
	"NotifyDue":         testNotifyDue,
	"NotifyRetryReopen": testNotifyRetryReopen,
	"NotifyClaimRace":   testNotifyClaimRace,
	"NotifyInvalid":     testNotifyInvalid,
}

func due(t *testing.T, b *bundle, target store.NotificationTarget, limit int) ([]string, time.Time) {
	t.Helper()
	got, next, err := b.s.DueNotifications(b.ctx, target, limit)
	require.NoError(t, err)
	var out []string
	for _, n := range got {
		require.Equal(t, target.Name, n.Target)
		require.False(t, n.State.Settled())
		out = append(out, n.Delivery)
	}
	return out, next
}

func testNotifyClaimSettle(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "run.completed", "r1", 0)
	const target = "webhook:https://example.com#abc"

	n, err := b.s.Notification(b.ctx, d.ID, target)
	require.NoError(t, err)
	require.Equal(t, store.Notification{Delivery: d.ID, Session: sess.ID, Target: target, State: store.NotifyPending}, n)

	c, err := b.s.ClaimNotification(b.ctx, d.ID, target, "a", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, store.NotificationClaim{Delivery: d.ID, Session: sess.ID, Target: target, Owner: "a", Epoch: 1, Attempt: 1, ExpiresAt: Start.Add(30 * time.Second)}, c)
	_, err = b.s.ClaimNotification(b.ctx, d.ID, target, "b", 30*time.Second)
	require.ErrorIs(t, err, belay.ErrLeaseHeld)
	_, err = b.s.ClaimNotification(b.ctx, d.ID, target, "a", 30*time.Second)
	require.ErrorIs(t, err, belay.ErrLeaseHeld, "a live claim is refused to its own owner too")
	// Another target of the same delivery is a notification of its own.
	other, err := b.s.ClaimNotification(b.ctx, d.ID, "hook:x#0", "b", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(1), other.Epoch)

	b.clk.Advance(time.Second)
	n, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeRetry, RetryAfter: 10 * time.Second, Error: "HTTP 503"})
	require.NoError(t, err)
	require.Equal(t, store.NotifyPending, n.State)
	require.Equal(t, Start.Add(11*time.Second), n.NotBefore)
	require.Equal(t, "HTTP 503", n.Error)
	require.Equal(t, 1, n.Attempts)
	require.Nil(t, n.Claim)
	_, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
	require.ErrorIs(t, err, belay.ErrNotLeased, "a settled attempt settles once")

	_, err = b.s.ClaimNotification(b.ctx, d.ID, target, "b", 30*time.Second)
	require.ErrorIs(t, err, store.ErrNotificationNotDue)
	b.clk.Advance(10 * time.Second)
	c2, err := b.s.ClaimNotification(b.ctx, d.ID, target, "b", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(2), c2.Epoch)
	require.Equal(t, 2, c2.Attempt)
	_, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
	var stale *belay.StaleEpochError
	require.ErrorAs(t, err, &stale)
	require.ErrorIs(t, err, belay.ErrStaleEpoch)

	n, err = b.s.SettleNotification(b.ctx, c2, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
	require.NoError(t, err)
	require.Equal(t, store.NotifySent, n.State)
	require.Equal(t, b.clk.Now(), n.SettledAt)
	require.Empty(t, n.Error)
	_, err = b.s.ClaimNotification(b.ctx, d.ID, target, "c", 30*time.Second)
	require.ErrorIs(t, err, belay.ErrTerminal)
	_, err = b.s.SettleNotification(b.ctx, c2, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
	require.ErrorIs(t, err, belay.ErrTerminal)

	// The claims and settlements are journaled in the delivery's session.
	evs, err := b.s.Events(b.ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	counts := map[string]int{}
	for _, e := range evs {
		counts[e.Type]++
	}
	require.Equal(t, 3, counts[belay.EventNotifyClaimed])
	require.Equal(t, 2, counts[belay.EventNotifySettled])
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: belay.EventNotifySettled, Data: []byte(`{}`)})
	require.ErrorIs(t, err, belay.ErrInvalid, "only the store writes notification events")

	b.reopen()
	n, err = b.s.Notification(b.ctx, d.ID, target)
	require.NoError(t, err)
	require.Equal(t, store.NotifySent, n.State)
	require.Equal(t, 2, n.Attempts)
	_, err = b.s.ClaimNotification(b.ctx, d.ID, target, "c", 30*time.Second)
	require.ErrorIs(t, err, belay.ErrTerminal)
	n, err = b.s.Notification(b.ctx, d.ID, "hook:x#0")
	require.NoError(t, err)
	require.Equal(t, store.NotifyClaimed, n.State)
	require.Equal(t, "b", n.Claim.Owner)
}

// testNotifyClaimExpiry checks that a claim whose owner died is taken by
// another owner after its TTL, by the store's clock, and that the dead
// owner's late settlement is refused.
func testNotifyClaimExpiry(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "run.failed", "r1", 0)
	target := store.NotificationTarget{Name: "t"}
	c, err := b.s.ClaimNotification(b.ctx, d.ID, "t", "a", 5*time.Second)
	require.NoError(t, err)
	got, next := due(t, b, target, 10)
	require.Empty(t, got)
	require.Equal(t, Start.Add(5*time.Second), next, "the claim's expiry is the next due time")

	b.clk.Advance(4 * time.Second)
	_, err = b.s.ClaimNotification(b.ctx, d.ID, "t", "b", 5*time.Second)
	require.ErrorIs(t, err, belay.ErrLeaseHeld)
	b.clk.Advance(time.Second)
	got, _ = due(t, b, target, 10)
	require.Equal(t, []string{d.ID}, got)
	c2, err := b.s.ClaimNotification(b.ctx, d.ID, "t", "b", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 2, c2.Attempt)
	_, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)

	// An expired claim nobody took again is still current and settles.
	b.clk.Advance(time.Minute)
	n, err := b.s.SettleNotification(b.ctx, c2, store.NotificationOutcome{Kind: store.NotifyOutcomeAbandoned, Error: "gave up"})
	require.NoError(t, err)
	require.Equal(t, store.NotifyAbandoned, n.State)
	got, next = due(t, b, target, 10)
	require.Empty(t, got)
	require.True(t, next.IsZero())
}

// testNotifyDue checks the listing: the target's filters, oldest first,
// the limit, deliveries posted after the first listing, and settled ones
// leaving it.
func testNotifyDue(t *testing.T, h Harness) {
	b := setup(t, h)
	s1, s2 := b.session(), b.session()
	a := post(t, b, s1.ID, "run.completed", "a", 0)
	b.clk.Advance(time.Second)
	post(t, b, s1.ID, "ui.click", "x", 5)
	b.clk.Advance(time.Second)
	c := post(t, b, s2.ID, "run.completed", "c", 0)
	b.clk.Advance(time.Second)

	all := store.NotificationTarget{Name: "all", Types: []string{"run.completed"}}
	only2 := store.NotificationTarget{Name: "only2", Sessions: []string{s2.ID}}
	got, next := due(t, b, all, 10)
	require.Equal(t, []string{a.ID, c.ID}, got)
	require.True(t, next.IsZero())
	got, _ = due(t, b, all, 1)
	require.Equal(t, []string{a.ID}, got)
	got, _ = due(t, b, only2, 10)
	require.Equal(t, []string{c.ID}, got)

	// Posted after the first listing: seen by the next one, through a
	// run's end as well as a plain post.
	r := b.run(s2.ID)
	l, err := b.s.AcquireRunLease(b.ctx, r.ID, "o", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete,
		Deliver: &belay.DeliveryInput{Session: s2.ID, Type: "run.completed", Key: r.ID}})
	require.NoError(t, err)
	b.clk.Advance(time.Second)
	e := post(t, b, s1.ID, "run.completed", "e", 0)
	got, _ = due(t, b, all, 10)
	require.Len(t, got, 4)
	require.Equal(t, []string{a.ID, c.ID}, got[:2])
	require.Equal(t, e.ID, got[3])

	for _, id := range got {
		cl, err := b.s.ClaimNotification(b.ctx, id, "all", "o", time.Minute)
		require.NoError(t, err)
		_, err = b.s.SettleNotification(b.ctx, cl, store.NotificationOutcome{Kind: store.NotifyOutcomeSent})
		require.NoError(t, err)
	}
	got, next = due(t, b, all, 10)
	require.Empty(t, got)
	require.True(t, next.IsZero())
	got, _ = due(t, b, only2, 10)
	require.Len(t, got, 2, "another target's notifications are its own")

	b.reopen()
	got, _ = due(t, b, all, 10)
	require.Empty(t, got, "settled notifications stay settled after a restart")
	got, _ = due(t, b, only2, 10)
	require.Len(t, got, 2)
}

// testNotifyRetryReopen checks that the retry schedule of a failed
// attempt is durable: after a restart the notification is due at the same
// time, not at once and not never, and its attempts count on.
func testNotifyRetryReopen(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "run.completed", "r", 0)
	target := store.NotificationTarget{Name: "t"}
	c, err := b.s.ClaimNotification(b.ctx, d.ID, "t", "a", time.Minute)
	require.NoError(t, err)
	_, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeRetry, RetryAfter: 2 * time.Minute, Error: "refused"})
	require.NoError(t, err)
	// A claim left by a process that died is kept too.
	d2 := post(t, b, sess.ID, "run.completed", "r2", 0)
	_, err = b.s.ClaimNotification(b.ctx, d2.ID, "t", "a", time.Minute)
	require.NoError(t, err)

	b.reopen()
	got, next := due(t, b, target, 10)
	require.Empty(t, got)
	require.Equal(t, Start.Add(time.Minute), next)
	n, err := b.s.Notification(b.ctx, d.ID, "t")
	require.NoError(t, err)
	require.Equal(t, Start.Add(2*time.Minute), n.NotBefore)
	require.Equal(t, "refused", n.Error)
	b.clk.Advance(time.Minute)
	got, next = due(t, b, target, 10)
	require.Equal(t, []string{d2.ID}, got)
	require.Equal(t, Start.Add(2*time.Minute), next)
	b.clk.Advance(time.Minute)
	got, _ = due(t, b, target, 10)
	require.Equal(t, []string{d.ID, d2.ID}, got)
	c2, err := b.s.ClaimNotification(b.ctx, d.ID, "t", "b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, c2.Attempt)
	require.Equal(t, uint64(2), c2.Epoch)
}

// testNotifyClaimRace checks that of many owners claiming the same
// notifications at once, exactly one gets each.
func testNotifyClaimRace(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	const n = 20
	var ds []belay.Delivery
	for i := 0; i < n; i++ {
		ds = append(ds, post(t, b, sess.ID, "run.completed", fmt.Sprint(i), 0))
	}
	var mu sync.Mutex
	won := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, d := range ds {
				_, err := b.s.ClaimNotification(b.ctx, d.ID, "t", fmt.Sprintf("o%d", w), time.Minute)
				switch {
				case err == nil:
					mu.Lock()
					won[d.ID]++
					mu.Unlock()
				case !errors.Is(err, belay.ErrLeaseHeld):
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, won, n)
	for id, c := range won {
		require.Equal(t, 1, c, id)
	}
}

func testNotifyInvalid(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "run.completed", "r", 0)
	_, err := b.s.ClaimNotification(b.ctx, d.ID, "t", "", time.Minute)
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.ClaimNotification(b.ctx, d.ID, "t", "o", 0)
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.ClaimNotification(b.ctx, ids.New(ids.Delivery), "t", "o", time.Minute)
	require.ErrorIs(t, err, belay.ErrNotFound)
	_, err = b.s.Notification(b.ctx, ids.New(ids.Delivery), "t")
	require.ErrorIs(t, err, belay.ErrNotFound)
	c, err := b.s.ClaimNotification(b.ctx, d.ID, "t", "o", time.Minute)
	require.NoError(t, err)
	_, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: "maybe"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.SettleNotification(b.ctx, c, store.NotificationOutcome{Kind: store.NotifyOutcomeRetry, RetryAfter: -time.Second})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, _, err = b.s.DueNotifications(b.ctx, store.NotificationTarget{}, 10)
	require.ErrorIs(t, err, belay.ErrInvalid)
}

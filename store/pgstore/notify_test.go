package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// TestNotifyTwoNodes runs a runtime on each of two nodes of one database,
// on the real clock, with claims judged by the database's now(): posting
// through both and sweeping often, every notification reaches the
// webhook receiver exactly once.
func TestNotifyTwoNodes(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	target := runtime.NotifyTarget{
		NotificationTarget: store.NotificationTarget{Name: "webhook:loopback"},
		Send: func(ctx context.Context, n runtime.Notice) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			if err != nil {
				return err
			}
			req.Header.Set("webhook-id", n.ID)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		},
	}
	var stores []store.Store
	var rts []*runtime.Runtime
	for i := 0; i < 2; i++ {
		s := open(t, url, nil)
		defer s.Close()
		rt, err := runtime.New(runtime.Options{Store: s, PruneEvery: -1, Notify: []runtime.NotifyTarget{target}, NotifySweep: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		defer func() { require.NoError(t, rt.Stop(ctx)) }()
		stores, rts = append(stores, s), append(rts, rt)
	}
	sess, err := stores[0].CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	const n = 30
	var ids []string
	for i := 0; i < n; i++ {
		d, _, err := rts[i%2].Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ping", Key: fmt.Sprint(i)})
		require.NoError(t, err)
		ids = append(ids, d.ID)
	}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			no, err := stores[1].Notification(ctx, id, target.Name)
			require.NoError(t, err)
			if no.State != store.NotifySent {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, n)
	for _, id := range ids {
		require.Equal(t, 1, got[runtime.NotificationID(id, target.Name)], id)
	}
}

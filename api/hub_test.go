package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store/fsstore"
)

// sseIDs follows an SSE stream of a session from lastID ("" for the
// start) until it has seen the event of seq until, and returns the ids it
// saw, in order. started is closed once the response headers arrived.
func sseIDs(ctx context.Context, url, lastID string, until uint64, started chan<- struct{}) ([]uint64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	close(started)
	var got []uint64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "id: ")
		if !ok {
			if strings.HasPrefix(sc.Text(), "event: error") {
				return got, fmt.Errorf("error event after %v", got)
			}
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return got, err
		}
		got = append(got, n)
		if n >= until {
			return got, nil
		}
	}
	return got, fmt.Errorf("stream ended after %v: %v", got, sc.Err())
}

// streamServer serves st's events over HTTP, its hubs holding keep
// events; it closes st at the end of the test.
func streamServer(t *testing.T, st *fsstore.Store, keep int) (*Server, *httptest.Server) {
	t.Helper()
	rt, err := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{}, PruneEvery: -1})
	require.NoError(t, err)
	s := NewServer(Options{Runtime: rt, Version: "test", Keepalive: time.Hour})
	s.hubKeep = keep
	srv := httptest.NewServer(s.Handler(""))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		s.hubWG.Wait()
		require.NoError(t, st.Close())
	})
	return s, srv
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

// TestSSEHubFanOut: many subscribers of one session share its hub; each
// sees every event once and in order, whether it started before the hub
// (reading the store first), within what the hub holds, or behind it
// (resuming from an event the hub dropped); the hub stops when the last
// subscriber leaves.
func TestSSEHubFanOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := fsstore.Open(ctx, t.TempDir(), fsstore.Options{})
	require.NoError(t, err)
	// The hub holds the last four: a resume further back reads the store.
	s, srv := streamServer(t, st, 4)
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	note := func(n int) {
		_, err := st.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
		require.NoError(t, err)
	}
	for i := range 3 {
		note(i)
	}
	url := srv.URL + "/v1/sessions/" + sess.ID + "/events"
	const subscribers, more = 20, 30
	last := uint64(1 + 3 + more) // session.created, three notes, then more

	type result struct {
		from uint64
		ids  []uint64
		err  error
	}
	results := make(chan result, subscribers+2)
	var wg sync.WaitGroup
	follow := func(lastID string, from uint64) {
		started := make(chan struct{})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			ids, err := sseIDs(ctx, url, lastID, last, started)
			results <- result{from, ids, err}
		})
		<-started
	}
	for range subscribers {
		follow("", 1)
	}
	// A subscriber that has its headers has joined (sse joins first).
	s.hubs.mu.Lock()
	require.Equal(t, subscribers, s.hubs.m[sess.ID].refs, "every subscriber joined the one hub")
	s.hubs.mu.Unlock()
	for i := range more {
		note(3 + i)
	}
	// The hub now holds the last four; one resume within them, one before.
	follow(strconv.FormatUint(last-2, 10), last-1)
	follow("6", 7)
	wg.Wait()
	close(results)
	n := 0
	for r := range results {
		require.NoError(t, r.err)
		require.Equal(t, seqRange(r.from, last), r.ids, "every event once, in order, from %d", r.from)
		n++
	}
	require.Equal(t, subscribers+2, n)
	// Its follower ends once the last subscriber left (the clients are
	// closed, so their handlers return); by then it is out of the map.
	srv.CloseClientConnections()
	s.hubWG.Wait()
	s.hubs.mu.Lock()
	require.Empty(t, s.hubs.m, "the hub stops when its last subscriber leaves")
	s.hubs.mu.Unlock()
}

// TestSSEDamagedSessionEndsWithError: a stream of a session whose journal
// is damaged gets the events before the damage, then one error event, and
// ends; so does every stream that comes after it.
func TestSSEDamagedSessionEndsWithError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := fsstore.Open(ctx, dir, fsstore.Options{})
	require.NoError(t, err)
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	for i := range 10 {
		_, err := st.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
	path := filepath.Join(dir, "sessions", sess.ID, "journal.jsonl")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	mid := bytes.IndexByte(data[len(data)/2:], '\n') + len(data)/2 + 20
	data[mid] ^= 0x01
	require.NoError(t, os.WriteFile(path, data, 0o600))

	st, err = fsstore.Open(ctx, dir, fsstore.Options{})
	require.NoError(t, err)
	_, srv := streamServer(t, st, defaultHubKeep)
	url := srv.URL + "/v1/sessions/" + sess.ID + "/events"
	for range 2 {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		ids, err := sseIDs(ctx, url, "", 1000, make(chan struct{}))
		cancel()
		require.ErrorContains(t, err, "error event")
		require.NotEmpty(t, ids, "the events before the damage")
		require.Equal(t, seqRange(1, ids[len(ids)-1]), ids)
		require.Less(t, ids[len(ids)-1], uint64(11), "nothing from the damage on")
	}
}

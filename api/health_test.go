package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
)

// sickStore is a store whose health the test sets.
type sickStore struct {
	store.Store
	err atomic.Pointer[error]
}

func (s *sickStore) Health(context.Context) error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// TestHealthDegraded: a store that cannot be written makes /healthz
// answer 503 degraded with the problem, and without the token (TCP) the
// status alone, so that load balancers take the node out; the node is ok
// again as soon as the store is.
func TestHealthDegraded(t *testing.T) {
	t.Parallel()
	fs, err := fsstore.Open(context.Background(), t.TempDir(), fsstore.Options{})
	require.NoError(t, err)
	st := &sickStore{Store: fs}
	rt, err := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{})}, PruneEvery: -1})
	require.NoError(t, err)
	require.NoError(t, rt.Start(context.Background()))
	const token = "s3cret-token-0123456789abcdef0123456789"
	srv := httptest.NewServer(NewServer(Options{Runtime: rt, Version: "test"}).Handler(token))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
		require.NoError(t, fs.Close())
	})
	get := func(auth bool) (int, map[string]any) {
		req, err := http.NewRequest("GET", srv.URL+"/healthz", nil)
		require.NoError(t, err)
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var body map[string]any
		require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
		return resp.StatusCode, body
	}
	code, body := get(true)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, apitype.HealthOK, body["status"])
	require.Nil(t, body["problems"])

	sick := fmt.Errorf("%w: postgres://db/belay does not answer: connection refused", belay.ErrStoreUnreachable)
	st.err.Store(&sick)
	code, body = get(true)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, apitype.HealthDegraded, body["status"])
	require.Equal(t, []any{"store unreachable: postgres://db/belay does not answer: connection refused"}, body["problems"])
	require.NotEmpty(t, body["incarnation"])
	code, body = get(false)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, map[string]any{"status": apitype.HealthDegraded}, body, "no detail without the token")

	fenced := fmt.Errorf("%w: this node stopped writing", belay.ErrReadOnly)
	st.err.Store(&fenced)
	code, body = get(true)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, []any{"store read-only: this node stopped writing"}, body["problems"])

	st.err.Store(nil)
	code, body = get(false)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, apitype.HealthOK, body["status"])
}

// TestStoreUnreachableIs503: a write the store could not make because it
// is unreachable is 503 store_unreachable, not a 500.
func TestStoreUnreachableIs503(t *testing.T) {
	t.Parallel()
	status, code := statusOf(fmt.Errorf("%w: connect: refused", belay.ErrStoreUnreachable))
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, apitype.CodeStoreUnreachable, code)
	status, code = statusOf(errors.Join(belay.ErrReadOnly, belay.ErrStoreUnreachable))
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, apitype.CodeReadOnly, code, "fenced for good is read_only")
}

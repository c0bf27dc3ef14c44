package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store/fsstore"
)

func (b *bundle) batch(body string) (int, apitype.BatchResponse, []byte) {
	b.t.Helper()
	code, raw := b.do("POST", "/v1/runs:batch", body, nil)
	var out apitype.BatchResponse
	if code == http.StatusOK {
		require.NoError(b.t, json.Unmarshal(raw, &out), "%s", raw)
	}
	return code, out, raw
}

// TestBatchSubmit: POST /v1/runs:batch makes each submission as POST
// /v1/runs would, answers each one's run or error in order, keeps one
// session's submissions in their order, and a retry with the same keys
// makes nothing twice.
func TestBatchSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	code, raw := b.do("POST", "/v1/sessions", `{"provider":"fake"}`, nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var sess belay.Session
	require.NoError(t, json.Unmarshal(raw, &sess))

	var items []string
	for i := range 5 {
		items = append(items, fmt.Sprintf(`{"session":%q,"prompt":"in order %d","idempotencyKey":"s-%d"}`, sess.ID, i, i))
	}
	items = append(items,
		`{"provider":"fake","prompt":"new session","idempotencyKey":"new-1","tags":["batch"],"meta":{"ticket":"T-1"}}`,
		`{"prompt":"no provider"}`,
		`{"provider":"nope","prompt":"unknown provider"}`,
		`{"provider":"fake","prompt":"bad tag","tags":["has space"]}`,
		`{"provider":"fake","prompt":"no key"}`,
	)
	body := `{"runs":[` + strings.Join(items, ",") + `]}`
	code, res, raw := b.batch(body)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	require.Len(t, res.Results, len(items))
	var first []string
	for i, r := range res.Results {
		switch i {
		case 6, 7, 8:
			require.Equal(t, http.StatusBadRequest, r.Status, "item %d", i)
			require.Nil(t, r.Run)
			require.NotNil(t, r.Error)
			require.Equal(t, apitype.CodeInvalid, r.Error.Code)
			require.NotEmpty(t, r.Error.Message)
		default:
			require.Equal(t, http.StatusCreated, r.Status, "item %d: %+v", i, r.Error)
			require.NotNil(t, r.Run)
			first = append(first, r.Run.ID)
		}
	}
	require.Contains(t, res.Results[7].Error.Message, "nope")
	require.Equal(t, []string{"batch"}, res.Results[5].Run.Tags)
	require.Equal(t, "T-1", res.Results[5].Run.Meta["ticket"])

	// One session's runs were created, and so queue, in the batch's order.
	code, raw = b.do("GET", "/v1/sessions/"+sess.ID+"/runs", "", nil)
	require.Equal(t, http.StatusOK, code)
	var list apitype.RunList
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Runs, 5)
	for i, r := range list.Runs {
		require.Equal(t, res.Results[i].Run.ID, r.ID, "run %d of the session", i)
	}

	// The same batch again: the keyed submissions return their runs.
	code, again, raw := b.batch(body)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	for i := range 6 {
		require.Equal(t, res.Results[i].Run.ID, again.Results[i].Run.ID, "item %d", i)
	}
	require.NotEqual(t, res.Results[9].Run.ID, again.Results[9].Run.ID, "without a key a submission is a new run")
}

// TestBatchLimits: an empty batch, one of more than MaxBatchRuns, or a
// body over MaxBatchBody is refused whole, naming the limit; nothing is
// made.
func TestBatchLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	for _, body := range []string{`{"runs":[]}`, `{}`, `{"runs":null}`} {
		code, _, raw := b.batch(body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", body, raw)
		require.Equal(t, apitype.CodeInvalid, errCode(t, raw))
	}
	code, _, raw := b.batch(`{"runs":[{"provider":"fake","prompt":"x","bogus":1}]}`)
	require.Equal(t, http.StatusBadRequest, code, "unknown fields are refused: %s", raw)

	many := `{"runs":[` + strings.Repeat(`{"provider":"fake","prompt":"x"},`, MaxBatchRuns) + `{"provider":"fake","prompt":"x"}]}`
	code, _, raw = b.batch(many)
	require.Equal(t, http.StatusBadRequest, code, "%s", raw)
	var e apitype.Error
	require.NoError(t, json.Unmarshal(raw, &e))
	require.Equal(t, apitype.CodeInvalid, e.Error.Code)
	require.EqualValues(t, MaxBatchRuns, e.Error.Details["limit"])
	require.Contains(t, e.Error.Message, "at most 1000 runs")

	big := `{"runs":[{"provider":"fake","prompt":"` + strings.Repeat("x", MaxBatchBody) + `"}]}`
	code, _, raw = b.batch(big)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.NoError(t, json.Unmarshal(raw, &e))
	require.Equal(t, apitype.CodeTooLarge, e.Error.Code)
	require.EqualValues(t, MaxBatchBody, e.Error.Details["limit"])

	code, raw = b.do("GET", "/v1/runs", "", nil)
	require.Equal(t, http.StatusOK, code)
	var page apitype.RunPage
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Empty(t, page.Runs, "a refused batch makes nothing")
}

// FuzzBatch: whatever the body, POST /v1/runs:batch answers a batch
// response with one result per submission (each a run or an error body)
// or an error body, never a 500.
func FuzzBatch(f *testing.F) {
	for _, s := range []string{
		`{"runs":[{"provider":"fake","prompt":"x","idempotencyKey":"k"}]}`,
		`{"runs":[{"session":"ses_01jfz0000000000000000000aa","prompt":"x"},{"provider":"fake","prompt":"y","tags":["a"],"meta":{"k":"v"}}]}`,
		`{"runs":[{"prompt":"x"}]}`,
		`{"runs":[{"provider":"fake","prompt":"x","deadline":-1}]}`,
		`{"runs":[{"provider":"fake","prompt":"x","idempotencyKey":"a\nb"}]}`,
		`{"runs":[{"session":"../x","prompt":"x"}]}`,
		`{"runs":[{"provider":"fake","prompt":"x","script":{"reply":"hi"},"policy":"reject"}]}`,
		`{"runs":[]}`, `{"runs":{}}`, `[]`, `{"runs":[null]}`, `{"runs":[1]}`, ``, `{`,
	} {
		f.Add(s)
	}
	st, err := fsstore.Open(context.Background(), f.TempDir(), fsstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{})}, PruneEvery: -1})
	if err != nil {
		f.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	h := NewServer(Options{Runtime: rt}).Handler("")
	f.Cleanup(func() { _ = rt.Stop(context.Background()); _ = st.Close() })
	f.Fuzz(func(t *testing.T, body string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := httptest.NewRequest("POST", "http://belay/v1/runs:batch", strings.NewReader(body)).WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch {
		case w.Code == http.StatusOK:
			var in apitype.BatchRequest
			require.NoError(t, json.Unmarshal([]byte(body), &in), "a 200 for a body that is not a batch")
			var out apitype.BatchResponse
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), "%s", w.Body.String())
			require.Len(t, out.Results, len(in.Runs))
			for i, r := range out.Results {
				switch {
				case r.Status == http.StatusCreated:
					require.NotNil(t, r.Run, "item %d", i)
					require.Nil(t, r.Error, "item %d", i)
				case r.Status >= 400 && r.Status < 500:
					require.NotNil(t, r.Error, "item %d", i)
					require.NotEmpty(t, r.Error.Code, "item %d", i)
					require.Nil(t, r.Run, "item %d", i)
				default:
					t.Fatalf("item %d: status %d: %+v", i, r.Status, r.Error)
				}
			}
		case w.Code >= 400 && w.Code < 500:
			var e apitype.Error
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), "%s", w.Body.String())
			require.NotEmpty(t, e.Error.Code)
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	})
}

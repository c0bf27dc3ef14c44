package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/belayhq/belay/apitype"
	"github.com/stretchr/testify/require"
)

func TestListsArePaged(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	var created []string
	for range 5 {
		code, raw := b.do("POST", "/v1/sessions", `{"provider":"fake"}`, nil)
		require.Equal(t, http.StatusCreated, code)
		var s struct{ ID string }
		require.NoError(t, json.Unmarshal(raw, &s))
		created = append([]string{s.ID}, created...) // newest first
	}
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		code, raw := b.do("GET", "/v1/sessions?limit=2&cursor="+cursor, "", nil)
		require.Equal(t, http.StatusOK, code, "%s", raw)
		var l apitype.SessionList
		require.NoError(t, json.Unmarshal(raw, &l))
		for _, s := range l.Sessions {
			seen = append(seen, s.ID)
		}
		if l.NextCursor == "" {
			break
		}
		require.Len(t, l.Sessions, 2)
		cursor = l.NextCursor
	}
	require.Equal(t, created, seen, "every session once, newest first")
	code, raw := b.do("GET", "/v1/sessions?cursor=nope", "", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, apitype.CodeInvalid, errCode(t, raw))

	// Runs and inbox items of a session.
	ses := created[0]
	var runs []string
	for i := range 3 {
		code, raw := b.do("POST", "/v1/sessions/"+ses+"/runs", fmt.Sprintf(`{"prompt":"p%d"}`, i), nil)
		require.Equal(t, http.StatusCreated, code, "%s", raw)
		var r apitype.Run
		require.NoError(t, json.Unmarshal(raw, &r))
		runs = append(runs, r.ID)
	}
	code, raw = b.do("GET", "/v1/sessions/"+ses+"/runs?limit=2", "", nil)
	require.Equal(t, http.StatusOK, code)
	var rl apitype.RunList
	require.NoError(t, json.Unmarshal(raw, &rl))
	require.Len(t, rl.Runs, 2)
	require.Equal(t, runs[:2], []string{rl.Runs[0].ID, rl.Runs[1].ID})
	require.NotEmpty(t, rl.NextCursor)
	code, raw = b.do("GET", "/v1/sessions/"+ses+"/runs?limit=2&cursor="+rl.NextCursor, "", nil)
	require.Equal(t, http.StatusOK, code)
	rl = apitype.RunList{}
	require.NoError(t, json.Unmarshal(raw, &rl))
	require.Len(t, rl.Runs, 1)
	require.Equal(t, runs[2], rl.Runs[0].ID)
	require.Empty(t, rl.NextCursor)

	for i, p := range []int{0, 5, 0, 5} {
		code, raw := b.do("POST", "/v1/sessions/"+ses+"/inbox", fmt.Sprintf(`{"type":"ui.event","key":"k%d","priority":%d}`, i, p), nil)
		require.Equal(t, http.StatusCreated, code, "%s", raw)
	}
	var all []int
	cursor = ""
	for {
		code, raw := b.do("GET", "/v1/sessions/"+ses+"/inbox?status=pending&limit=1&cursor="+cursor, "", nil)
		require.Equal(t, http.StatusOK, code, "%s", raw)
		var dl apitype.DeliveryList
		require.NoError(t, json.Unmarshal(raw, &dl))
		for _, d := range dl.Deliveries {
			if d.Type == "ui.event" {
				all = append(all, d.Priority)
			}
		}
		if dl.NextCursor == "" {
			break
		}
		cursor = dl.NextCursor
	}
	require.Equal(t, []int{5, 5, 0, 0}, all, "every item once, in delivery order")
}

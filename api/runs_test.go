package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

func TestListRunsAcrossSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	var want []string
	for i := range 7 {
		tags := `["all"]`
		if i%2 == 0 {
			tags = `["all","even"]`
		}
		code, raw := b.do("POST", "/v1/runs", fmt.Sprintf(`{"provider":"fake","prompt":"p%d","tags":%s,"meta":{"i":"%d"}}`, i, tags, i), nil)
		require.Equal(t, http.StatusCreated, code, "%s", raw)
		var r apitype.Run
		require.NoError(t, json.Unmarshal(raw, &r))
		want = append(want, r.ID)
	}
	slices.Reverse(want) // newest first

	page := func(q string) apitype.RunPage {
		t.Helper()
		code, raw := b.do("GET", "/v1/runs?"+q, "", nil)
		require.Equal(t, http.StatusOK, code, "%s", raw)
		var p apitype.RunPage
		require.NoError(t, json.Unmarshal(raw, &p))
		return p
	}
	// Paging with the cursor visits every run once, in order.
	var got []string
	cursor := ""
	for i := 0; ; i++ {
		require.Less(t, i, 10)
		p := page("tag=all&limit=3&cursor=" + url.QueryEscape(cursor))
		for _, r := range p.Runs {
			got = append(got, r.ID)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	require.Equal(t, want, got)

	p := page("tag=even&sort=oldest&limit=100")
	require.Len(t, p.Runs, 4)
	require.Equal(t, want[6], p.Runs[0].ID)
	require.Equal(t, "0", p.Runs[0].Meta["i"])
	require.Empty(t, p.NextCursor)
	require.Empty(t, page("failed=true").Runs)
	require.Len(t, page("provider=fake&since=1h").Runs, 7)

	// The store's page selection agrees with sorting everything.
	for _, sort := range []string{apitype.SortNewest, apitype.SortOldest, apitype.SortUpdated} {
		for _, limit := range []int{1, 2, 3, 100} {
			q := apitype.RunQuery{RunFilter: belay.RunFilter{Tag: "all"}, Sort: sort, Limit: limit}
			var viaStore, viaSort []string
			for {
				page, next, err := ListRuns(context.Background(), b.rt.Store(), q)
				require.NoError(t, err)
				for _, r := range page {
					viaStore = append(viaStore, r.ID)
				}
				if next == "" {
					break
				}
				q.Cursor = next
			}
			all, err := b.rt.Store().Runs(context.Background(), belay.RunFilter{Tag: "all"})
			require.NoError(t, err)
			for _, r := range pageRuns(all, sort, nil, 1000) {
				viaSort = append(viaSort, r.ID)
			}
			require.Equal(t, viaSort, viaStore, "%s limit %d", sort, limit)
		}
	}

	for _, q := range []string{"limit=0", "limit=5000", "sort=sideways", "status=bogus", "tag=a%20b", "since=yesterday", "failed=maybe", "cursor=zzz", "session=../x"} {
		code, raw := b.do("GET", "/v1/runs?"+q, "", nil)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", q, raw)
		require.Equal(t, apitype.CodeInvalid, errCode(t, raw))
		var e apitype.Error
		require.NoError(t, json.Unmarshal(raw, &e))
		field, _, _ := strings.Cut(q, "=")
		require.Equal(t, field, e.Error.Details["field"], "%s: details.field names the parameter", q)
	}
}

// TestPageRuns checks pages against a full sort, in every order.
func TestPageRuns(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var runs []belay.Run
	for i := range 500 {
		at := base.Add(time.Duration(rand.IntN(50)) * time.Second) // many ties
		runs = append(runs, belay.Run{ID: fmt.Sprintf("run_%026d", i), CreatedAt: at, UpdatedAt: at.Add(time.Duration(rand.IntN(50)) * time.Second)})
	}
	for _, sort := range []string{apitype.SortNewest, apitype.SortOldest, apitype.SortUpdated} {
		full := slices.Clone(runs)
		slices.SortFunc(full, func(a, b belay.Run) int {
			ka, kb := keyOf(&a, sort), keyOf(&b, sort)
			if ka.before(kb, sort) {
				return -1
			}
			return 1
		})
		var got []belay.Run
		var after *runKey
		for {
			p := pageRuns(runs, sort, after, 37)
			if len(p) == 0 {
				break
			}
			got = append(got, p...)
			k, err := decodeCursor(encodeCursor(keyOf(&p[len(p)-1], sort)))
			require.NoError(t, err)
			after = &k
		}
		require.Equal(t, full, got, sort)
	}
}

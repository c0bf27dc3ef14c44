package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGroupSyncerCoversEveryCaller(t *testing.T) {
	t.Parallel()
	var rounds atomic.Int64
	var fail atomic.Bool
	g := NewGroupSyncer(func() error {
		rounds.Add(1)
		time.Sleep(2 * time.Millisecond)
		if fail.Load() {
			return errors.New("EIO")
		}
		return nil
	})
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				if err := g.Sync(nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	require.Less(t, rounds.Load(), int64(64*20), "syncs are shared")
	fail.Store(true)
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() { errs <- g.Sync(nil) }()
	}
	for i := 0; i < 8; i++ {
		require.Error(t, <-errs, "a failed sync fails every caller it covered")
	}
}

// TestJournalsShareGroupSyncs runs many journals on one GroupSyncer and
// checks that everything acknowledged is in the files.
func TestJournalsShareGroupSyncs(t *testing.T) {
	t.Parallel()
	var rounds atomic.Int64
	gate := make(chan struct{})
	var g *GroupSyncer
	g = NewGroupSyncer(func() error {
		if rounds.Add(1) == 1 {
			<-gate // hold the first sync until the others queue behind it
		}
		return nil
	})
	go func() {
		for {
			g.mu.Lock()
			n := g.waiting[2]
			g.mu.Unlock()
			if n >= 15 {
				close(gate)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var js []*Journal
	for i := 0; i < 16; i++ {
		j, err := Open(t.TempDir(), Options{Syncer: g})
		require.NoError(t, err)
		js = append(js, j)
	}
	var wg sync.WaitGroup
	for _, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				if _, err := j.Append(context.Background(), Sync, ev("x", fmt.Sprint(k))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for _, j := range js {
		require.Equal(t, uint64(50), j.LastSeq())
		require.NoError(t, j.Close())
	}
	require.LessOrEqual(t, rounds.Load(), int64(16*50-14), "15 commits shared the second sync")
}

package fsstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// model is a naive reference scheduler: it rescans everything.
type model struct {
	limits   store.Limits
	order    uint64
	active   map[string]*job
	sessionQ map[string][]*job
}

func (m *model) submit(j *job, p belay.Policy) []string {
	var cancel []string
	switch p {
	case belay.PolicyInterrupt:
		for _, a := range m.active {
			if a.session == j.session {
				cancel = append(cancel, a.id)
			}
		}
	case belay.PolicyReplace:
		for _, q := range m.sessionQ[j.session] {
			cancel = append(cancel, q.id)
		}
	}
	m.order++
	j.order = m.order
	if p == belay.PolicyInterrupt {
		m.sessionQ[j.session] = append([]*job{j}, m.sessionQ[j.session]...)
	} else {
		m.sessionQ[j.session] = append(m.sessionQ[j.session], j)
	}
	return cancel
}

func (m *model) promote() []string {
	var started []string
	for {
		var heads []*job
		for _, q := range m.sessionQ {
			if len(q) > 0 {
				heads = append(heads, q[0])
			}
		}
		sort.Slice(heads, func(a, b int) bool {
			if heads[a].priority != heads[b].priority {
				return heads[a].priority > heads[b].priority
			}
			return heads[a].order < heads[b].order
		})
		progress := false
		for _, h := range heads {
			if m.limits.Global > 0 && len(m.active) >= m.limits.Global {
				return started
			}
			if m.sessionActive(h.session) || m.providerFull(h.provider) {
				continue
			}
			m.active[h.id] = h
			m.sessionQ[h.session] = m.sessionQ[h.session][1:]
			started = append(started, h.id)
			progress = true
			break // rescan: the order of what is eligible changed
		}
		if !progress {
			return started
		}
	}
}

func (m *model) sessionActive(s string) bool {
	for _, a := range m.active {
		if a.session == s {
			return true
		}
	}
	return false
}

func (m *model) providerFull(p string) bool {
	c := m.limits.PerProvider[p]
	if c == 0 {
		return false
	}
	n := 0
	for _, a := range m.active {
		if a.provider == p {
			n++
		}
	}
	return n >= c
}

func (m *model) remove(id string) {
	for s, q := range m.sessionQ {
		for i, j := range q {
			if j.id == id {
				m.sessionQ[s] = append(q[:i:i], q[i+1:]...)
				return
			}
		}
	}
}

// TestSchedulerRandomized runs thousands of random operations and checks,
// after each, that the scheduler agrees with the naive model and that no
// cap is exceeded, no session has two active runs, order is FIFO within a
// priority, and no queued run waits while it could start.
func TestSchedulerRandomized(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 99))
			limits := store.Limits{Global: 1 + rng.IntN(8), PerProvider: map[string]int{"a": 1 + rng.IntN(3), "b": 1 + rng.IntN(5)}}
			s := newScheduler(limits)
			m := &model{limits: limits, active: map[string]*job{}, sessionQ: map[string][]*job{}}
			policies := []belay.Policy{belay.PolicyEnqueue, belay.PolicyEnqueue, belay.PolicyEnqueue, belay.PolicyReject, belay.PolicyInterrupt, belay.PolicyReplace}
			providers := []string{"a", "b", "c"}
			var n int
			for op := 0; op < 3000; op++ {
				switch r := rng.IntN(10); {
				case r < 5: // submit
					n++
					id := fmt.Sprintf("r%05d", n)
					sess := fmt.Sprintf("s%d", rng.IntN(12))
					prov := providers[rng.IntN(len(providers))]
					prio := rng.IntN(3)
					pol := policies[rng.IntN(len(policies))]
					if pol == belay.PolicyEnqueue && rng.IntN(2) == 0 {
						// A submit that asks for the lease: admitted at once
						// exactly when the next promotion would start it.
						ok := s.admit(id, sess, prov)
						m.submit(&job{id: id, session: sess, provider: prov, priority: prio}, pol)
						want := m.promote()
						require.Equal(t, slices.Equal(want, []string{id}), ok, "op %d: admit differs from what a claim would start (model %v)", op, want)
						if !ok {
							s.add(id, sess, prov, prio, false)
						}
						break
					}
					res, err := s.submit(id, sess, prov, prio, pol)
					if pol == belay.PolicyReject && (m.sessionActive(sess) || len(m.sessionQ[sess]) > 0) {
						require.ErrorIs(t, err, store.ErrConversationBusy)
						continue
					}
					require.NoError(t, err)
					want := m.submit(&job{id: id, session: sess, provider: prov, priority: prio}, pol)
					require.ElementsMatch(t, want, res.Cancel)
					for _, c := range res.Cancel {
						// The runtime cancels: queued ones are removed, an
						// active one finishes.
						if s.remove(c) {
							m.remove(c)
						} else {
							s.finish(c)
							delete(m.active, c)
						}
					}
				case r < 8: // an active run finishes
					if len(m.active) > 0 {
						ids := keys(m.active)
						id := ids[rng.IntN(len(ids))]
						s.finish(id)
						delete(m.active, id)
					}
				default: // a queued run is cancelled
					var qs []string
					for _, q := range m.sessionQ {
						for _, j := range q {
							qs = append(qs, j.id)
						}
					}
					if len(qs) > 0 {
						slices.Sort(qs)
						id := qs[rng.IntN(len(qs))]
						require.True(t, s.remove(id))
						m.remove(id)
					}
				}
				got := s.promote(0)
				want := m.promote()
				require.Equal(t, want, got, "op %d: promotion differs from the model", op)
				checkInvariants(t, s, m)
			}
		})
	}
}

func keys(m map[string]*job) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func checkInvariants(t *testing.T, s *scheduler, m *model) {
	t.Helper()
	require.Equal(t, len(m.active), s.activeCount())
	if s.limits.Global > 0 {
		require.LessOrEqual(t, s.activeCount(), s.limits.Global, "global cap")
	}
	perProv := map[string]int{}
	perSess := map[string]int{}
	for _, j := range s.active {
		perProv[j.provider]++
		perSess[j.session]++
	}
	for p, c := range s.limits.PerProvider {
		require.LessOrEqual(t, perProv[p], c, "provider %s cap", p)
	}
	for sess, c := range perSess {
		require.Equal(t, 1, c, "session %s has %d active runs", sess, c)
	}
	// No queued run waits while it could start.
	globalFull := s.limits.Global > 0 && s.activeCount() >= s.limits.Global
	for sess, q := range s.sessionQ {
		if len(q) == 0 {
			continue
		}
		_, sessBusy := s.bySession[sess]
		require.True(t, globalFull || sessBusy || s.providerFull(q[0].provider),
			"run %s waits with capacity free", q[0].id)
	}
}

func TestSchedulerPolicies(t *testing.T) {
	t.Parallel()
	s := newScheduler(store.Limits{})
	_, err := s.submit("r1", "s", "p", 0, belay.PolicyEnqueue)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, s.promote(0))
	_, err = s.submit("r2", "s", "p", 0, "")
	require.NoError(t, err)
	_, err = s.submit("r3", "s", "p", 0, belay.PolicyEnqueue)
	require.NoError(t, err)
	require.Empty(t, s.promote(0), "one active run per session")
	_, err = s.submit("r4", "s", "p", 0, belay.PolicyReject)
	require.ErrorIs(t, err, store.ErrConversationBusy)

	res, err := s.submit("r5", "s", "p", 0, belay.PolicyReplace)
	require.NoError(t, err)
	require.Equal(t, []string{"r2", "r3"}, res.Cancel)
	for _, c := range res.Cancel {
		require.True(t, s.remove(c))
	}
	res, err = s.submit("r6", "s", "p", 0, belay.PolicyInterrupt)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, res.Cancel)
	s.finish("r1")
	require.Equal(t, []string{"r6"}, s.promote(0), "the interrupting run goes first")
	s.finish("r6")
	require.Equal(t, []string{"r5"}, s.promote(0))
	require.Zero(t, s.queuedCount())
}

func TestSchedulerPriorityAndCaps(t *testing.T) {
	t.Parallel()
	s := newScheduler(store.Limits{Global: 2, PerProvider: map[string]int{"slow": 1}})
	for i, sub := range []struct {
		prov string
		prio int
	}{{"slow", 0}, {"slow", 5}, {"fast", 0}, {"fast", 9}} {
		_, err := s.submit(fmt.Sprint("r", i), fmt.Sprint("s", i), sub.prov, sub.prio, "")
		require.NoError(t, err)
	}
	require.Equal(t, []string{"r3", "r1"}, s.promote(0), "priority first, within caps")
	s.finish("r1")
	require.Equal(t, []string{"r0"}, s.promote(0), "slow's cap frees for its parked run")
	s.finish("r3")
	require.Equal(t, []string{"r2"}, s.promote(0))
}

// submitResult says what submitting a run requires of the runtime.
type submitResult struct {
	// Cancel lists runs to cancel: the active run (interrupt) or queued
	// ones (replace).
	Cancel []string
}

// busy reports whether a session has a run queued or running.
func (s *scheduler) busy(session string) bool {
	_, active := s.bySession[session]
	return active || len(s.sessionQ[session]) > 0
}

// submit queues a run under a policy, as Submit decides it, and says
// what to cancel. It does not start it: call promote.
func (s *scheduler) submit(id, session, provider string, priority int, p belay.Policy) (submitResult, error) {
	var res submitResult
	if s.queued[id] != nil || s.active[id] != nil {
		return res, nil
	}
	switch p {
	case belay.PolicyReject:
		if s.busy(session) {
			return res, store.ErrConversationBusy
		}
	case belay.PolicyInterrupt:
		if a, ok := s.bySession[session]; ok {
			res.Cancel = append(res.Cancel, a)
		}
	case belay.PolicyReplace:
		for _, q := range s.sessionQ[session] {
			res.Cancel = append(res.Cancel, q.id)
		}
	}
	s.add(id, session, provider, priority, p == belay.PolicyInterrupt)
	return res, nil
}

// TestSchedulerRoomOfACancelledHead: a run ended frees its provider's
// room for one parked head; when that head is cancelled (or put behind an
// interrupting run) before it starts, the room goes to the next parked
// head, not to waste until another run of the provider ends.
func TestSchedulerRoomOfACancelledHead(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancelled", "interrupted"} {
		s := newScheduler(store.Limits{PerProvider: map[string]int{"slow": 1}})
		for i := range 3 {
			_, err := s.submit(fmt.Sprint("r", i), fmt.Sprint("s", i), "slow", 0, "")
			require.NoError(t, err)
		}
		require.Equal(t, []string{"r0"}, s.promote(0))
		require.Empty(t, s.promote(0), "slow is at its cap: r1 and r2 wait")
		s.finish("r0") // r1 is given slow's room
		switch how {
		case "cancelled":
			require.True(t, s.remove("r1"))
		case "interrupted":
			_, err := s.submit("r3", "s1", "fast", 0, belay.PolicyInterrupt)
			require.NoError(t, err)
		}
		got := s.promote(0)
		require.Contains(t, got, "r2", "%s: r2 starts in the room r1 did not take", how)
	}
}

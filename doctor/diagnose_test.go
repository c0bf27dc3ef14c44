package doctor

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/cmdline"
	"github.com/belayhq/belay/lock"
	"github.com/stretchr/testify/require"
)

type diagnoseCase struct {
	name    string
	mod     func(in *Input)
	action  apitype.DoctorAction
	rule    string
	command string   // exact, when set
	reason  []string // substrings of the reason
}

var resendCmd = "belay runs retry " + runA

// diagnoseCases covers every action and every rule, and the order between
// rules that could both match.
var diagnoseCases = []diagnoseCase{
	{name: "empty session", mod: func(in *Input) {}, action: apitype.ActionNone, rule: "idle", command: ""},
	{name: "only unknown runs", mod: func(in *Input) { in.Runs = []belay.Run{{ID: runA, Status: "weird"}} }, action: apitype.ActionNone, rule: "idle"},

	// 1. quarantine wins over everything.
	{name: "quarantined state", mod: func(in *Input) {
		in.Session.State = belay.SessionQuarantined
		in.Session.Problem = "journal: quarantined"
	}, action: apitype.ActionRepairJournal, rule: "journal_quarantined", command: "belay repair --session " + sesID},
	{name: "quarantined journal beats dead daemon and stale lock", mod: func(in *Input) {
		running(in, runA)
		in.Daemon = Daemon{Lock: staleLock()}
		in.Journal = Journal{Path: "/data/my sessions/" + sesID + "/journal.jsonl", Quarantined: true, QuarantineOffset: 4096, LastGoodSeq: 17}
	}, action: apitype.ActionRepairJournal, rule: "journal_quarantined",
		command: "belay repair '/data/my sessions/" + sesID + "/journal.jsonl'", reason: []string{"byte 4096", "seq 17"}},

	{name: "quarantined at the first event: a repair cannot rebuild it", mod: func(in *Input) {
		in.Session.State = belay.SessionQuarantined
		in.Journal = Journal{Path: "/data/sessions/x/journal.jsonl", Quarantined: true}
	}, action: apitype.ActionResolveManually, rule: "journal_quarantined", command: "belay sessions delete " + sesID,
		reason: []string{"first event (byte 0)", "Restore /data/sessions/x/journal.jsonl"}},
	{name: "journal unreadable: not damage, no repair", mod: func(in *Input) {
		in.Session.State = belay.SessionQuarantined
		in.Journal = Journal{Path: "/data/sessions/x/journal.jsonl", OpenError: "open /data/sessions/x/journal.jsonl: permission denied"}
	}, action: apitype.ActionResolveManually, rule: "journal_quarantined", command: "belay sessions doctor " + sesID,
		reason: []string{"cannot be read", "permission denied", "owner and mode"}},

	// 2-4. daemon down with work pending.
	{name: "stale lock, daemon down, running", mod: func(in *Input) {
		running(in, runA)
		in.Daemon = Daemon{Lock: staleLock()}
	}, action: apitype.ActionReleaseStaleLock, rule: "lock_stale", command: "belay daemon start", reason: []string{"holder_process_gone"}},
	{name: "stale lock, daemon down, queued", mod: func(in *Input) {
		queued(in, runA)
		in.Daemon = Daemon{Lock: staleLock()}
	}, action: apitype.ActionReleaseStaleLock, rule: "lock_stale"},
	{name: "stale lock without pending work does not matter", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		in.Daemon = Daemon{Lock: staleLock()}
		in.Offline = true
	}, action: apitype.ActionReadResult, rule: "run_complete", command: "belay read " + runA},
	{name: "daemon down, lock free", mod: func(in *Input) {
		queued(in, runA)
		in.Daemon = Daemon{Lock: freeLock()}
	}, action: apitype.ActionStartDaemon, rule: "daemon_down", command: "belay daemon start"},
	{name: "daemon down, lock not inspected", mod: func(in *Input) {
		running(in, runA)
		in.Daemon = Daemon{}
	}, action: apitype.ActionStartDaemon, rule: "daemon_down"},
	{name: "daemon down, lock held by a live process", mod: func(in *Input) {
		running(in, runA)
		in.Daemon.Reachable = false
	}, action: apitype.ActionRetryLater, rule: "daemon_unresponsive", command: "belay daemon status",
		reason: []string{"pid 4242", "holds the run's lease"}},
	{name: "journal deleted", mod: func(in *Input) {
		in.Session.State = belay.SessionQuarantined
		in.Journal = Journal{Path: "/data/sessions/x/journal.jsonl", Missing: true}
	}, action: apitype.ActionResolveManually, rule: "journal_lost", command: "belay sessions delete " + sesID,
		reason: []string{"missing", "Restore the file"}},
	{name: "journal empty", mod: func(in *Input) {
		in.Session.State = belay.SessionQuarantined
		in.Journal = Journal{Path: "/data/sessions/x/journal.jsonl", Empty: true}
	}, action: apitype.ActionResolveManually, rule: "journal_lost", command: "belay sessions delete " + sesID, reason: []string{"is empty"}},
	{name: "disk full while a run streams", mod: func(in *Input) {
		running(in, runA)
		in.Journal = Journal{Path: "/data/sessions/x/journal.jsonl", DiskFull: true, FreeBytes: 4096, WriteError: "belay: disk full"}
	}, action: apitype.ActionRetryLater, rule: "journal_write_failing", command: "belay sessions doctor " + sesID,
		reason: []string{"disk of the data directory is full", "4096 bytes free", "without a restart"}},
	{name: "a write failed on an intact journal", mod: func(in *Input) {
		in.Journal = Journal{WriteError: "journal: fdatasync: input/output error"}
	}, action: apitype.ActionRetryLater, rule: "journal_write_failing", command: "belay sessions doctor " + sesID,
		reason: []string{"intact", "retries by itself"}},
	{name: "daemon down, lock held by a stopped process", mod: func(in *Input) {
		running(in, runA)
		in.Daemon.Reachable = false
		in.Daemon.Lock.Verdict = lock.Verdict{Reason: lock.ReasonHung, Alive: true, Local: true, Stopped: true,
			Detail: "holder pid 4242 is alive but stopped (SIGSTOP or suspended); no heartbeat for 40s", Action: "kill -CONT 4242"}
	}, action: apitype.ActionResolveManually, rule: "daemon_unresponsive", command: "belay daemon stop",
		reason: []string{"pid 4242", "never replaced", "kill -CONT 4242"}},

	// 5. dead lease owners.
	{name: "lease of a previous incarnation", mod: func(in *Input) {
		running(in, runA).Lease.Owner = incOld + "/w1"
	}, action: apitype.ActionReattach, rule: "lease_owner_dead", command: "belay watch " + runA, reason: []string{"previous daemon incarnation"}},
	{name: "lease owner prefix is not ownership", mod: func(in *Input) {
		running(in, runA).Lease.Owner = incCur + "x/w1"
	}, action: apitype.ActionReattach, rule: "lease_owner_dead"},
	{name: "expired lease", mod: func(in *Input) {
		running(in, runA).Lease.ExpiresAt = ago(time.Second)
	}, action: apitype.ActionReattach, rule: "lease_owner_dead", reason: []string{"expired"}},
	{name: "running without lease", mod: func(in *Input) {
		running(in, runA).Lease = nil
	}, action: apitype.ActionReattach, rule: "lease_owner_dead", reason: []string{"no lease"}},
	{name: "owner reported dead", mod: func(in *Input) {
		running(in, runA)
		in.Daemon.OwnerAlive = map[string]bool{incCur + "/w1": false}
	}, action: apitype.ActionReattach, rule: "lease_owner_dead"},
	{name: "owner of another node reported alive", mod: func(in *Input) {
		running(in, runA).Lease.Owner = "node-2/w7"
		in.Daemon.OwnerAlive = map[string]bool{"node-2/w7": true}
	}, action: apitype.ActionWatch, rule: "running_active"},
	{name: "dead owner beats a challenge", mod: func(in *Input) {
		r := running(in, runA)
		r.Lease.Owner = incOld
		r.Phase, r.Error = belay.PhaseRecovering, &belay.RunError{Class: belay.ClassChallenge}
	}, action: apitype.ActionReattach, rule: "lease_owner_dead"},

	// 6. a running run blocked on a person.
	{name: "running, challenge pending", mod: func(in *Input) {
		r := running(in, runA)
		r.Phase, r.Error = belay.PhaseRecovering, &belay.RunError{Class: belay.ClassChallenge}
	}, action: apitype.ActionSolveChallenge, rule: "blocked_on_user", command: "belay watch " + runA},
	{name: "running, credentials refused", mod: func(in *Input) {
		r := running(in, runA)
		r.Phase, r.Error = belay.PhaseRetryWait, &belay.RunError{Class: belay.ClassAuth}
	}, action: apitype.ActionReauth, rule: "blocked_on_user", command: "belay watch " + runA},
	{name: "old challenge error while streaming again", mod: func(in *Input) {
		running(in, runA).Error = &belay.RunError{Class: belay.ClassChallenge}
	}, action: apitype.ActionWatch, rule: "running_active"},
	{name: "retry_wait on a transient error", mod: func(in *Input) {
		r := running(in, runA)
		r.Phase, r.Error = belay.PhaseRetryWait, &belay.RunError{Class: belay.ClassTransient}
	}, action: apitype.ActionWatch, rule: "running_active"},

	// 7-8. running and alive: watch or wait, never terminal (G8).
	{name: "running with recent progress", mod: func(in *Input) { running(in, runA) },
		action: apitype.ActionWatch, rule: "running_active", command: "belay watch " + runA, reason: []string{"5s ago"}},
	{name: "running, activity unknown", mod: func(in *Input) {
		running(in, runA)
		in.Facts = nil
	}, action: apitype.ActionWatch, rule: "running_active", reason: []string{"not known"}},
	{name: "running, quiet within deadline", mod: func(in *Input) {
		running(in, runA)
		setFacts(in, runA, RunFacts{LastActivity: ago(12 * time.Minute)})
	}, action: apitype.ActionWait, rule: "running_quiet", command: "belay wait " + runA, reason: []string{"12m", "not a failure"}},
	{name: "running, quiet past watchdog tier and deadline", mod: func(in *Input) {
		running(in, runA).Deadline = ago(2 * time.Minute)
		setFacts(in, runA, RunFacts{LastActivity: ago(time.Hour), InactivityDeadline: ago(30 * time.Minute)})
	}, action: apitype.ActionWait, rule: "running_quiet", reason: []string{"deadline passed 2m ago"}},
	{name: "running, quiet, no deadline", mod: func(in *Input) {
		running(in, runA).Deadline = time.Time{}
		setFacts(in, runA, RunFacts{LastActivity: ago(3 * time.Minute)})
	}, action: apitype.ActionWait, rule: "running_quiet"},
	{name: "running, quiet threshold tuned", mod: func(in *Input) {
		running(in, runA)
		setFacts(in, runA, RunFacts{LastActivity: ago(3 * time.Minute)})
		in.Thresholds.Quiet = 10 * time.Minute
	}, action: apitype.ActionWatch, rule: "running_active"},
	{name: "running beats an unsettled delivery", mod: func(in *Input) {
		finished(in, runB, belay.RunComplete, "", time.Hour)
		running(in, runA)
		delivery(in, dlvA, belay.DeliveryPending, 5)
	}, action: apitype.ActionWatch, rule: "running_active"},
	{name: "daemon up, owner unknown", mod: func(in *Input) {
		running(in, runA)
		in.Daemon.Incarnation = ""
	}, action: apitype.ActionWatch, rule: "running_active"},

	// 9. queued.
	{name: "queued", mod: func(in *Input) { queued(in, runA) }, action: apitype.ActionWait, rule: "queued", command: "belay wait " + runA},
	{name: "queued behind the running run", mod: func(in *Input) {
		running(in, runA)
		queued(in, runB)
	}, action: apitype.ActionWatch, rule: "running_active"},

	// 10. retention (G12).
	{name: "complete past retention", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 15*day)
	}, action: apitype.ActionPrune, rule: "retention_due", command: "belay sessions prune", reason: []string{"15d", "14d"}},
	{name: "failed run keeps the session 30 days", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassTransient, 15*day)
	}, action: apitype.ActionResend, rule: "failed_resendable", command: resendCmd},
	{name: "stranded past failed retention", mod: func(in *Input) {
		finished(in, runA, belay.RunStranded, "", 31*day)
	}, action: apitype.ActionPrune, rule: "retention_due"},
	{name: "empty session past retention", mod: func(in *Input) {
		in.Session.UpdatedAt = ago(20 * day)
	}, action: apitype.ActionPrune, rule: "retention_due"},
	{name: "recent journal event keeps it", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 15*day)
		in.LastEventAt = ago(time.Hour)
	}, action: apitype.ActionReadResult, rule: "run_complete"},
	{name: "delivery settled within grace keeps it", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 15*day)
		delivery(in, dlvA, belay.DeliveryDone, 4).CreatedAt = ago(15 * day)
	}, action: apitype.ActionReadResult, rule: "run_complete"},
	{name: "unsettled delivery keeps it", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 15*day)
		delivery(in, dlvA, belay.DeliveryPending, 4).CreatedAt = ago(15 * day)
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled"},
	{name: "an outcome notice nobody took does not keep it", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 15*day)
		d := delivery(in, dlvA, belay.DeliveryPending, 4)
		d.Type, d.CreatedAt = belay.DeliveryRunCompleted, ago(15*day)
	}, action: apitype.ActionPrune, rule: "retention_due"},
	{name: "an outcome notice a consumer took keeps it", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 15*day)
		d := delivery(in, dlvA, belay.DeliveryPending, 4)
		d.Type, d.CreatedAt, d.Attempts = belay.DeliveryRunCompleted, ago(15*day), 1
	}, action: apitype.ActionReadResult, rule: "run_complete"},
	{name: "custom retention", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", 2*day)
		in.Retention.KeepComplete = day
	}, action: apitype.ActionPrune, rule: "retention_due"},

	// 11. stranded (G9).
	{name: "stranded after a side-effecting tool", mod: func(in *Input) {
		finished(in, runA, belay.RunStranded, "", time.Hour).Reason = `side-effecting tool "send_email" settled (call call_1); not resent`
	}, action: apitype.ActionResolveManually, rule: "run_stranded", command: "belay read " + runA, reason: []string{`"send_email"`}},
	{name: "stranded, tools from facts", mod: func(in *Input) {
		finished(in, runA, belay.RunStranded, "", time.Hour)
		setFacts(in, runA, RunFacts{SideEffects: []string{"git_push"}})
	}, action: apitype.ActionResolveManually, rule: "run_stranded", reason: []string{`"git_push"`}},
	{name: "stranded, no tool known", mod: func(in *Input) {
		finished(in, runA, belay.RunStranded, "", time.Hour)
	}, action: apitype.ActionResolveManually, rule: "run_stranded"},
	{name: "stranded beats an unsettled delivery", mod: func(in *Input) {
		finished(in, runA, belay.RunStranded, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryPending, 4)
	}, action: apitype.ActionResolveManually, rule: "run_stranded"},

	// 12-17. failed.
	{name: "failed auth", mod: func(in *Input) { finished(in, runA, belay.RunFailed, belay.ClassAuth, time.Hour) },
		action: apitype.ActionReauth, rule: "failed_auth", command: resendCmd},
	{name: "failed auth beats an unsettled delivery", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassAuth, time.Hour)
		delivery(in, dlvA, belay.DeliveryPending, 4)
	}, action: apitype.ActionReauth, rule: "failed_auth"},
	{name: "failed challenge", mod: func(in *Input) { finished(in, runA, belay.RunFailed, belay.ClassChallenge, time.Hour) },
		action: apitype.ActionSolveChallenge, rule: "failed_challenge", command: resendCmd},
	{name: "failed after a side effect", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassTransient, time.Hour)
		setFacts(in, runA, RunFacts{SideEffects: []string{"deploy"}})
	}, action: apitype.ActionResolveManually, rule: "failed_after_side_effect", command: "belay read " + runA, reason: []string{`"deploy"`}},
	{name: "rate limited just now", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassRateLimited, 10*time.Second)
	}, action: apitype.ActionRetryLater, rule: "failed_backoff", command: resendCmd, reason: []string{"50s", "the provider named no time to wait"}},
	{name: "overloaded, Retry-After ahead", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassOverloaded, 5*time.Minute)
		setFacts(in, runA, RunFacts{RetryAt: now.Add(10 * time.Minute)})
	}, action: apitype.ActionRetryLater, rule: "failed_backoff", reason: []string{"10m", "the provider asked to wait"}},
	{name: "rate limited, backoff over", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassRateLimited, 5*time.Minute)
	}, action: apitype.ActionResend, rule: "failed_resendable", command: resendCmd},
	{name: "failed timeout", mod: func(in *Input) { finished(in, runA, belay.RunFailed, belay.ClassTimeout, time.Hour) },
		action: apitype.ActionResend, rule: "failed_resendable"},
	{name: "failed internal", mod: func(in *Input) { finished(in, runA, belay.RunFailed, belay.ClassInternal, time.Hour) },
		action: apitype.ActionResend, rule: "failed_resendable"},
	{name: "failed invalid request", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassInvalidRequest, time.Hour)
	}, action: apitype.ActionResolveManually, rule: "failed_other", command: "belay read " + runA, reason: []string{"invalid_request"}},
	{name: "failed context overflow", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassContextOverflow, time.Hour)
	}, action: apitype.ActionResolveManually, rule: "failed_other"},
	{name: "failed without error", mod: func(in *Input) { finished(in, runA, belay.RunFailed, "", time.Hour) },
		action: apitype.ActionResolveManually, rule: "failed_other", reason: []string{"unknown"}},
	{name: "only the newest run counts", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassAuth, 2*time.Hour)
		finished(in, runB, belay.RunComplete, "", time.Hour)
	}, action: apitype.ActionReadResult, rule: "run_complete", command: "belay read " + runB},

	// 18. deliveries.
	{name: "complete with a pending delivery", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryPending, 4)
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", command: "belay inbox poll --session " + sesID},
	{name: "complete with a leased delivery", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryLeased, 4)
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", command: "belay inbox ack " + dlvA + " --epoch 3", reason: []string{"agent-1"}},
	{name: "expired delivery lease is polled", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryLeased, 4).Lease.ExpiresAt = ago(time.Second)
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", command: "belay inbox poll --session " + sesID},
	{name: "delivery due later", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryPending, 4).NotBefore = now.Add(time.Minute)
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", command: "belay inbox poll --session " + sesID, reason: []string{"due again"}},
	{name: "external event on an idle session", mod: func(in *Input) {
		delivery(in, dlvB, belay.DeliveryPending, 2).Type = "ui.comment"
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", reason: []string{"ui.comment"}},
	{name: "undelivered MCP wake-up", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		d := delivery(in, dlvA, belay.DeliveryPending, 4)
		d.Type, d.To, d.AfterRun = "mcp.wake", "mcp:tag:mcp", runA
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", command: "belay inbox poll --to mcp:tag:mcp", reason: []string{"belay mcp"}},
	{name: "MCP wake-up due again", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		d := delivery(in, dlvA, belay.DeliveryPending, 4)
		d.Type, d.To, d.AfterRun, d.NotBefore = "mcp.wake", "mcp:tag:mcp", runA, now.Add(time.Minute)
	}, action: apitype.ActionAckDelivery, rule: "delivery_unsettled", command: "belay inbox poll --to mcp:tag:mcp", reason: []string{"due again"}},
	{name: "a wake-up held for a running run is not due", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		d := delivery(in, dlvA, belay.DeliveryPending, 4)
		d.Type, d.To, d.AfterRun = "mcp.wake", "mcp:tag:mcp", runB
		queued(in, runB)
	}, action: apitype.ActionWait, rule: "queued"},
	{name: "complete with its own unacked completion notice", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryPending, 4).Type = "run.completed"
	}, action: apitype.ActionReadResult, rule: "run_complete", command: "belay read " + runA},
	{name: "cancelled with a failed notice of an older run", mod: func(in *Input) {
		finished(in, runA, belay.RunFailed, belay.ClassTimeout, 2*time.Hour)
		delivery(in, dlvA, belay.DeliveryPending, 4).Type = "run.failed"
		finished(in, runB, belay.RunCancelled, "", time.Hour)
	}, action: apitype.ActionNone, rule: "run_cancelled"},
	{name: "failed quota", mod: func(in *Input) { finished(in, runA, belay.RunFailed, belay.ClassQuota, time.Hour) },
		action: apitype.ActionResolveManually, rule: "failed_quota", command: resendCmd, reason: []string{"quota or billing"}},
	{name: "settled deliveries do not count", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		delivery(in, dlvA, belay.DeliveryDone, 4)
		delivery(in, dlvB, belay.DeliveryError, 5)
	}, action: apitype.ActionReadResult, rule: "run_complete"},

	// 19-21.
	{name: "complete", mod: func(in *Input) { finished(in, runA, belay.RunComplete, "", time.Hour) },
		action: apitype.ActionReadResult, rule: "run_complete", command: "belay read " + runA},
	{name: "complete, daemon down", mod: func(in *Input) {
		finished(in, runA, belay.RunComplete, "", time.Hour)
		in.Daemon, in.Offline = Daemon{Lock: freeLock()}, true
	}, action: apitype.ActionReadResult, rule: "run_complete"},
	{name: "cancelled", mod: func(in *Input) { finished(in, runA, belay.RunCancelled, "", time.Hour) },
		action: apitype.ActionNone, rule: "run_cancelled", command: ""},
}

func TestDiagnose(t *testing.T) {
	t.Parallel()
	for _, tc := range diagnoseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := setup()
			tc.mod(&in)
			rep := Diagnose(in)
			require.Equal(t, tc.action, rep.NextAction, "reason: %s", rep.Reason)
			require.Equal(t, tc.rule, rep.Rule)
			if tc.command != "" || tc.action == apitype.ActionNone {
				require.Equal(t, tc.command, rep.Command)
			}
			checkReport(t, rep)
			for _, s := range tc.reason {
				require.Contains(t, rep.Reason, s)
			}
		})
	}
}

// checkReport checks what holds for every report.
func checkReport(t *testing.T, rep apitype.DoctorReport) {
	t.Helper()
	require.True(t, rep.NextAction.Valid(), "nextAction %q", rep.NextAction)
	require.NotEmpty(t, rep.Reason)
	require.NotEmpty(t, rep.Rule)
	require.Equal(t, apitype.DoctorSchema, rep.Schema)
	require.NotNil(t, rep.Diagnostics)
	require.NotNil(t, rep.Unsettled)
	require.Equal(t, rep.NextAction == apitype.ActionNone, rep.Command == "", "command %q for %s", rep.Command, rep.NextAction)
	if rep.Command != "" {
		require.True(t, strings.HasPrefix(rep.Command, "belay "), rep.Command)
		require.Contains(t, Commands("SES", "RUN", "DLV", "FILE", "SITE", 7), commandShape(rep.Command),
			"every command a report names is one of Commands (which the CLI's tests parse)")
	}
	for _, d := range rep.Diagnostics {
		require.True(t, d.Severity.Valid(), "%+v", d)
		require.NotEmpty(t, d.Code)
		require.NotEmpty(t, d.Message)
	}
	_, err := json.Marshal(rep)
	require.NoError(t, err)
}

// TestDecisionTableCovered checks that the cases reach every rule and every
// action, so the table in docs/doctor.md is tested row by row.
func TestDecisionTableCovered(t *testing.T) {
	t.Parallel()
	rulesHit, actionsHit := map[string]bool{}, map[apitype.DoctorAction]bool{}
	for _, tc := range diagnoseCases {
		rulesHit[tc.rule], actionsHit[tc.action] = true, true
	}
	for _, r := range rules {
		require.True(t, rulesHit[r.name], "no case for rule %s", r.name)
	}
	for _, a := range apitype.DoctorActions() {
		require.True(t, actionsHit[a], "no case for action %s", a)
	}
	names := map[string]bool{}
	for _, r := range rules {
		require.False(t, names[r.name], "rule %s twice", r.name)
		names[r.name] = true
	}
}

func TestActionValid(t *testing.T) {
	t.Parallel()
	all := apitype.DoctorActions()
	require.Len(t, all, 15)
	seen := map[apitype.DoctorAction]bool{}
	for _, a := range all {
		require.True(t, a.Valid(), a)
		require.False(t, seen[a], a)
		seen[a] = true
	}
	for _, a := range []apitype.DoctorAction{"", "None", "timeout", "failed", "reattach "} {
		require.False(t, a.Valid(), a)
	}
	require.False(t, apitype.Severity("fatal").Valid())
}

// TestLocalTimeoutNeverTerminal checks G8: however long a run with a live
// owner is quiet, the doctor says watch or wait, never a terminal action.
func TestLocalTimeoutNeverTerminal(t *testing.T) {
	t.Parallel()
	for _, quiet := range []time.Duration{0, time.Minute, 3 * time.Minute, time.Hour, 48 * time.Hour} {
		for _, deadline := range []time.Duration{-time.Hour, 0, time.Hour} {
			in := setup()
			r := running(&in, runA)
			r.Deadline = now.Add(deadline)
			setFacts(&in, runA, RunFacts{LastActivity: ago(quiet), InactivityDeadline: ago(quiet / 2)})
			rep := Diagnose(in)
			require.Contains(t, []apitype.DoctorAction{apitype.ActionWatch, apitype.ActionWait}, rep.NextAction, "quiet %s deadline %s: %s", quiet, deadline, rep.Reason)
		}
	}
}

// TestDeterministic checks that the same input gives the same report, and
// that Diagnose does not change its input.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	for _, tc := range diagnoseCases {
		in := setup()
		tc.mod(&in)
		runs := slices.Clone(in.Runs)
		first, err := json.Marshal(Diagnose(in))
		require.NoError(t, err)
		for range 3 {
			again, err := json.Marshal(Diagnose(in))
			require.NoError(t, err)
			require.Equal(t, string(first), string(again), tc.name)
		}
		require.Equal(t, runs, in.Runs, tc.name)
	}
}

func TestReportDetails(t *testing.T) {
	t.Parallel()
	in := setup()
	finished(&in, runB, belay.RunFailed, belay.ClassTransient, time.Hour)
	r := running(&in, runA)
	r.Lease.Owner = incOld
	setFacts(&in, runA, RunFacts{LastActivity: ago(90 * time.Second)})
	delivery(&in, dlvA, belay.DeliveryPending, 7)
	delivery(&in, dlvB, belay.DeliveryLeased, 3).Priority = 5
	delivery(&in, "dlv_done", belay.DeliveryDone, 2)

	rep := Diagnose(in)
	require.Equal(t, apitype.ActionReattach, rep.NextAction)
	require.NotNil(t, rep.ActiveRun)
	require.Equal(t, runA, rep.ActiveRun.ID)
	require.Equal(t, "running", rep.ActiveRun.Status)
	require.Equal(t, "streaming", rep.ActiveRun.Phase)
	require.NotNil(t, rep.LastRun)
	require.Equal(t, runB, rep.LastRun.ID)
	require.Equal(t, "transient", rep.LastRun.ErrorClass)
	require.NotNil(t, rep.Lease)
	require.Equal(t, apitype.OwnerDead, rep.Lease.OwnerState)
	require.NotNil(t, rep.LastActivityAgeSeconds)
	require.EqualValues(t, 90, *rep.LastActivityAgeSeconds)
	require.Equal(t, apitype.RunCounts{Total: 2, Running: 1, Failed: 1}, rep.Runs)
	require.Equal(t, apitype.DeliveryCounts{Total: 3, Unsettled: 2, Pending: 1, Leased: 1, Done: 1}, rep.Deliveries)
	require.Len(t, rep.Unsettled, 2)
	require.Equal(t, dlvB, rep.Unsettled[0].ID, "delivery order is priority, then seq")
	require.True(t, rep.PruneAt.IsZero(), "no prune date while a run is active")
	codes := []string{}
	for _, d := range rep.Diagnostics {
		codes = append(codes, d.Code)
	}
	require.Equal(t, []string{"lease_owner_dead", "run_failed", "delivery_unsettled"}, codes)

	in.Thresholds.MaxUnsettled = 1
	require.Len(t, Diagnose(in).Unsettled, 1)
}

func TestPruneAt(t *testing.T) {
	t.Parallel()
	in := setup()
	finished(&in, runA, belay.RunComplete, "", day)
	rep := Diagnose(in)
	require.Equal(t, ago(day).Add(14*day), rep.PruneAt)

	in = setup()
	finished(&in, runA, belay.RunStranded, "", day)
	require.Equal(t, ago(day).Add(30*day), Diagnose(in).PruneAt)
}

func TestDiagnosticsDaemonAndJournal(t *testing.T) {
	t.Parallel()
	in := setup()
	queued(&in, runA)
	in.Daemon = Daemon{Lock: staleLock()}
	in.Offline = true
	in.Journal = Journal{Path: "/data/sessions/" + sesID + "/journal.jsonl", BrokenCopy: "/data/sessions/" + sesID + "/journal.jsonl.broken-20261122T115900Z"}
	rep := Diagnose(in)
	require.Equal(t, apitype.ActionReleaseStaleLock, rep.NextAction)
	require.True(t, rep.Offline)
	require.NotNil(t, rep.Lock)
	require.Equal(t, apitype.LockStale, rep.Lock.State)
	require.Equal(t, 4242, rep.Lock.Holder.PID)
	require.NotNil(t, rep.Journal)
	require.False(t, rep.Journal.Quarantined)
	codes := map[string]apitype.Severity{}
	for _, d := range rep.Diagnostics {
		codes[d.Code] = d.Severity
	}
	require.Equal(t, apitype.SeverityWarn, codes["torn_tail_cut"])
	require.Equal(t, apitype.SeverityWarn, codes["daemon_unreachable"])
	require.Equal(t, apitype.SeverityWarn, codes["lock_stale"])
}

func TestWakeUpDiagnostics(t *testing.T) {
	t.Parallel()
	codes := func(rep apitype.DoctorReport) []string {
		var out []string
		for _, d := range rep.Diagnostics {
			out = append(out, d.Code)
		}
		return out
	}
	// Held for a run still going: not unsettled work yet.
	in := setup()
	running(&in, runA)
	d := delivery(&in, dlvA, belay.DeliveryPending, 4)
	d.Type, d.To, d.AfterRun = "mcp.wake", "mcp:tag:mcp", runA
	rep := Diagnose(in)
	require.NotContains(t, codes(rep), "delivery_unsettled")
	require.Empty(t, rep.Unsettled)

	// Due and not delivered: named, with its addressee.
	in = setup()
	finished(&in, runA, belay.RunComplete, "", time.Hour)
	d = delivery(&in, dlvA, belay.DeliveryPending, 4)
	d.Type, d.To, d.AfterRun, d.Attempts = "mcp.wake", "mcp:tag:mcp", runA, 3
	rep = Diagnose(in)
	require.Contains(t, codes(rep), "wake_undelivered")
	require.Equal(t, "mcp:tag:mcp", rep.Unsettled[0].To)
	require.Equal(t, runA, rep.Unsettled[0].AfterRun)

	// Given up: a missed wake-up stays visible.
	in = setup()
	finished(&in, runA, belay.RunComplete, "", time.Hour)
	d = delivery(&in, dlvA, belay.DeliveryError, 4)
	d.Type, d.To, d.AfterRun, d.Result = "mcp.wake", "mcp:tag:mcp", runA, "missed: no client was subscribed"
	rep = Diagnose(in)
	require.Contains(t, codes(rep), "wake_missed")
	require.Equal(t, apitype.ActionReadResult, rep.NextAction)
}

var (
	idShape      = regexp.MustCompile(`\b(ses|run|dlv)_[0-9a-z]{26}\b`)
	epochShape   = regexp.MustCompile(`--epoch [0-9]+`)
	repairShape  = regexp.MustCompile(`^belay repair [^-].*$`)
	siteShape    = regexp.MustCompile(`^belay browser (login|check) \S+( --provider \S+)?$`)
	siteURLShape = regexp.MustCompile(`^belay browser (login|check) \S+( --provider \S+)? --url \S+$`)
	providerArg  = regexp.MustCompile(`^ --provider \S+$`)
)

// commandShape replaces the identifiers of a report's command by the
// placeholders TestDiagnose passes to Commands.
func commandShape(cmd string) string {
	cmd = idShape.ReplaceAllStringFunc(cmd, func(id string) string { return strings.ToUpper(id[:3]) })
	cmd = epochShape.ReplaceAllString(cmd, "--epoch 7")
	// Any provider name stands as ExampleBrowserProvider.
	prov := func(arg string) string {
		return providerArg.ReplaceAllString(arg, " --provider "+ExampleBrowserProvider)
	}
	if m := siteShape.FindStringSubmatch(cmd); m != nil {
		cmd = "belay browser " + m[1] + " SITE" + prov(m[2])
	}
	if m := siteURLShape.FindStringSubmatch(cmd); m != nil {
		cmd = "belay browser " + m[1] + " SITE" + prov(m[2]) + " --url " + cmdline.Quote(ExampleSiteURL)
	}
	return repairShape.ReplaceAllString(cmd, "belay repair FILE")
}

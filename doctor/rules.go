package doctor

import (
	"fmt"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/lock"
)

// decision is what a matching rule decides.
type decision struct {
	action  apitype.DoctorAction
	reason  string
	command string
	retryAt time.Time
}

// rule is one row of the decision table: the first rule that matches
// decides the report's next action.
type rule struct {
	name  string
	match func(d *diagnosis) (decision, bool)
}

// rules is the decision table, in order (docs/doctor.md, "Decision
// table"). The last rule always matches.
var rules = [...]rule{
	{"journal_lost", ruleJournalLost},
	{"journal_write_failing", ruleWriteFailing},
	{"journal_quarantined", ruleQuarantined},
	{"lock_stale", ruleStaleLock},
	{"daemon_down", ruleDaemonDown},
	{"daemon_unresponsive", ruleDaemonUnresponsive},
	{"lease_owner_dead", ruleOwnerDead},
	{"blocked_on_user", ruleBlockedOnUser},
	{"running_active", ruleRunningActive},
	{"running_quiet", ruleRunningQuiet},
	{"queued", ruleQueued},
	{"retention_due", ruleRetention},
	{"run_stranded", ruleStranded},
	{"failed_auth", ruleFailedAuth},
	{"failed_challenge", ruleFailedChallenge},
	{"failed_quota", ruleFailedQuota},
	{"failed_after_side_effect", ruleFailedAfterSideEffect},
	{"failed_backoff", ruleFailedBackoff},
	{"failed_resendable", ruleFailedResendable},
	{"failed_other", ruleFailedOther},
	{"delivery_unsettled", ruleUnsettled},
	{"run_complete", ruleComplete},
	{"run_cancelled", ruleCancelled},
	{"idle", ruleIdle},
}

func decide(a apitype.DoctorAction, command, format string, args ...any) (decision, bool) {
	return decision{action: a, command: command, reason: fmt.Sprintf(format, args...)}, true
}

// running reports the active run when it is running.
func (d *diagnosis) running() *belay.Run {
	if r := d.active; r != nil && effectiveStatus(r) == belay.RunRunning {
		return r
	}
	return nil
}

// failed reports the last run when it failed.
func (d *diagnosis) failed() *belay.Run {
	if d.active == nil && d.last != nil && d.lastSt == belay.RunFailed {
		return d.last
	}
	return nil
}

func failedClass(r *belay.Run) belay.ErrorClass {
	if r.Error == nil {
		return ""
	}
	return r.Error.Class
}

func ruleQuarantined(d *diagnosis) (decision, bool) {
	j := d.in.Journal
	if !j.Quarantined && d.in.Session.State != belay.SessionQuarantined {
		return decision{}, false
	}
	if j.OpenError != "" {
		// Not damage: a repair cannot read the file either.
		return decide(apitype.ActionResolveManually, cmdSessionsDoctor(d.sid), "The session's journal %s cannot be read (%s), so the session is read-only; its bytes may be intact. Fix what stops the daemon reading it (its owner and mode: the daemon's user must read and write it), then restart the daemon (belay daemon stop; the next command starts it) and check again.", scrubText(j.Path), scrubText(j.OpenError))
	}
	if j.Quarantined && j.LastGoodSeq == 0 { // as store.JournalInfo.Repairable judges
		// A repair keeps the events after the damage only after a good
		// first event: it refuses a journal whose first line is damaged.
		return decide(apitype.ActionResolveManually, cmdSessionsDelete(d.sid), "The journal's first event (byte 0) is damaged, so the session is read-only and a repair cannot rebuild the journal (it starts from a good first event). Restore %s from a backup and restart the daemon, or delete the session.", scrubText(j.Path))
	}
	cmd := cmdRepair(j.Path, d.sid)
	// A repair takes the data directory's lock: it refuses beside a
	// running daemon.
	first := ""
	if d.in.Daemon.Reachable {
		first = " Stop the daemon first (belay daemon stop): a repair refuses beside a running one."
	}
	if j.Quarantined {
		return decide(apitype.ActionRepairJournal, cmd, "The journal is damaged at byte %d after seq %d, so the session is read-only; repair the journal before anything else.%s", j.QuarantineOffset, j.LastGoodSeq, first)
	}
	return decide(apitype.ActionRepairJournal, cmd, "The session's journal is damaged before its tail, so the session is read-only; repair the journal before anything else.%s", first)
}

// ruleJournalLost: the journal file is gone or empty. A repair has
// nothing to work on; the way out is to restore the file or delete the
// session.
func ruleJournalLost(d *diagnosis) (decision, bool) {
	j := d.in.Journal
	if !j.Missing && !j.Empty {
		return decision{}, false
	}
	what := "missing (deleted?)"
	if j.Empty {
		what = "empty"
	}
	return decide(apitype.ActionResolveManually, cmdSessionsDelete(d.sid), "The session's journal %s is %s, so its history is gone and nothing can run in it. Restore the file from a backup and restart the daemon, or delete the session.", scrubText(j.Path), what)
}

// ruleWriteFailing: the last write failed (a full disk, an I/O error) and
// the journal is intact. It is never "damaged, repair": the session heals
// by itself once the cause is gone.
func ruleWriteFailing(d *diagnosis) (decision, bool) {
	j := d.in.Journal
	if j.Quarantined || (!j.DiskFull && j.WriteError == "") {
		return decision{}, false
	}
	again := cmdSessionsDoctor(d.sid)
	if j.DiskFull {
		free := "an unknown number of"
		if j.FreeBytes >= 0 {
			free = fmt.Sprint(j.FreeBytes)
		}
		return decide(apitype.ActionRetryLater, again, "The disk of the data directory is full (%s bytes free), so writes to this session fail; the journal is intact and nothing acknowledged was lost. Free space (or wait for it): the session accepts writes again by itself, without a restart.", free)
	}
	return decide(apitype.ActionRetryLater, again, "The last write to this session's journal failed (%s); the journal is intact and nothing acknowledged was lost. The next write retries by itself; if it keeps failing, check the disk.", scrubText(j.WriteError))
}

func ruleStaleLock(d *diagnosis) (decision, bool) {
	if d.active == nil || !d.down || d.lockState != apitype.LockStale {
		return decision{}, false
	}
	return decide(apitype.ActionReleaseStaleLock, cmdDaemonStart, "Run %s is %s but no daemon answers and the data-dir lock is stale (%s); starting the daemon reclaims the lock at once and resumes the run.",
		token(d.active.ID), effectiveStatus(d.active), token(string(d.in.Daemon.Lock.Reason)))
}

func ruleDaemonDown(d *diagnosis) (decision, bool) {
	if d.active == nil || !d.down || d.lockState == apitype.LockHeld || d.lockState == apitype.LockStale {
		return decision{}, false
	}
	return decide(apitype.ActionStartDaemon, cmdDaemonStart, "Run %s is %s but no daemon answers, so nothing is executing it; start the daemon to resume it.",
		token(d.active.ID), effectiveStatus(d.active))
}

func ruleDaemonUnresponsive(d *diagnosis) (decision, bool) {
	if d.active == nil || !d.down || d.lockState != apitype.LockHeld {
		return decision{}, false
	}
	if st := d.in.Daemon.Lock; st.Reason == lock.ReasonHung && st.Action != "" {
		// Alive but silent past its TTL: never replaced; a person resumes
		// or ends it, and the next start resumes the run.
		return decide(apitype.ActionResolveManually, cmdDaemonStop, "Run %s is %s and the daemon that owns the data dir is alive but not heartbeating (%s); it is never replaced while alive: resume it (%s) or stop it, and the run resumes.",
			token(d.active.ID), effectiveStatus(d.active), scrubText(st.Detail), st.Action)
	}
	also := ""
	if d.ownerState == apitype.OwnerAlive {
		also = "; that process holds the run's lease, so the run may still be progressing"
	}
	return decide(apitype.ActionRetryLater, cmdDaemonStatus, "Run %s is %s and the data dir is locked by a live process (%s) that does not answer as a daemon%s; check the daemon and retry when it answers.",
		token(d.active.ID), effectiveStatus(d.active), holderText(d.in.Daemon.Lock), also)
}

func ruleOwnerDead(d *diagnosis) (decision, bool) {
	r := d.running()
	if r == nil || d.ownerState != apitype.OwnerDead {
		return decision{}, false
	}
	return decide(apitype.ActionReattach, cmdWatch(token(r.ID)), "Run %s is in phase %s but its lease owner is dead (%s); reattaching lets the daemon reclaim it at once and resume it from the provider.",
		token(r.ID), token(string(r.Phase)), d.ownerDetail)
}

func ruleBlockedOnUser(d *diagnosis) (decision, bool) {
	r := d.running()
	if r == nil || (r.Phase != belay.PhaseRetryWait && r.Phase != belay.PhaseRecovering) {
		return decision{}, false
	}
	id := token(r.ID)
	switch failedClass(r) {
	case belay.ClassChallenge:
		return decide(apitype.ActionSolveChallenge, cmdWatch(id), "Run %s is waiting (%s) on a challenge from provider %s; solve it in the provider's window, then watch the run continue.",
			id, token(string(r.Phase)), token(r.Provider))
	case belay.ClassAuth:
		return decide(apitype.ActionReauth, cmdWatch(id), "Run %s is waiting (%s) because provider %s refused its credentials; re-authenticate, then watch the run continue.",
			id, token(string(r.Phase)), token(r.Provider))
	}
	return decision{}, false
}

func ruleRunningActive(d *diagnosis) (decision, bool) {
	r := d.running()
	if r == nil || d.quiet {
		return decision{}, false
	}
	id := token(r.ID)
	if d.activity.IsZero() {
		return decide(apitype.ActionWatch, cmdWatch(id), "Run %s is in phase %s under a live lease; watch it (the time of its last progress is not known).", id, token(string(r.Phase)))
	}
	return decide(apitype.ActionWatch, cmdWatch(id), "Run %s is in phase %s and made progress %s ago; watch it.", id, token(string(r.Phase)), age(d.quietFor))
}

func ruleRunningQuiet(d *diagnosis) (decision, bool) {
	r := d.running()
	if r == nil || !d.quiet {
		return decision{}, false
	}
	id := token(r.ID)
	switch {
	case r.Deadline.IsZero():
		return decide(apitype.ActionWait, cmdWait(id), "Run %s has made no progress for %s but its owner is alive; a quiet run is not a failure (the watchdog judges it), so wait for it.", id, age(d.quietFor))
	case d.now.Before(r.Deadline):
		return decide(apitype.ActionWait, cmdWait(id), "Run %s has made no progress for %s but its owner is alive and its deadline is %s away; a quiet run is not a failure, so wait for it.", id, age(d.quietFor), age(r.Deadline.Sub(d.now)))
	}
	return decide(apitype.ActionWait, cmdWait(id), "Run %s has made no progress for %s and its deadline passed %s ago; the daemon ends it, so wait for the outcome.", id, age(d.quietFor), age(d.now.Sub(r.Deadline)))
}

func ruleQueued(d *diagnosis) (decision, bool) {
	r := d.active
	if r == nil || effectiveStatus(r) != belay.RunQueued {
		return decision{}, false
	}
	id := token(r.ID)
	return decide(apitype.ActionWait, cmdWait(id), "Run %s is queued for admission or behind the session's active run; wait for it.", id)
}

func ruleRetention(d *diagnosis) (decision, bool) {
	if !d.prunable {
		return decision{}, false
	}
	return decide(apitype.ActionPrune, cmdPrune, "The session is %s and idle for %s, past its retention of %s, so prune deletes it.", d.pruneWhat, age(d.pruneAge), age(d.pruneKeep))
}

func ruleStranded(d *diagnosis) (decision, bool) {
	if d.active != nil || d.last == nil || d.lastSt != belay.RunStranded {
		return decision{}, false
	}
	r := d.last
	id := token(r.ID)
	if tools := d.sideEffects(r); len(tools) > 0 {
		return decide(apitype.ActionResolveManually, cmdRead(id), "Run %s is stranded because side-effecting tool %q settled before the turn ended, so a resend could repeat it; read what happened and finish by hand.", id, tools[0])
	}
	return decide(apitype.ActionResolveManually, cmdRead(id), "Run %s is stranded: belay could not finish it without risking a repeated side effect; read what happened and finish by hand.", id)
}

func ruleFailedAuth(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil || failedClass(r) != belay.ClassAuth {
		return decision{}, false
	}
	return decide(apitype.ActionReauth, cmdRetry(token(r.ID)), "Run %s failed because provider %s refused its credentials; re-authenticate, then resend.", token(r.ID), token(r.Provider))
}

func ruleFailedChallenge(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil || failedClass(r) != belay.ClassChallenge {
		return decision{}, false
	}
	return decide(apitype.ActionSolveChallenge, cmdRetry(token(r.ID)), "Run %s failed on a challenge from provider %s; solve it in the provider's window, then resend.", token(r.ID), token(r.Provider))
}

func ruleFailedQuota(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil || failedClass(r) != belay.ClassQuota {
		return decision{}, false
	}
	return decide(apitype.ActionResolveManually, cmdRetry(token(r.ID)), "Run %s failed because provider %s refused it for quota or billing (the credentials are fine); add credit or raise the limit with the provider, then retry.", token(r.ID), token(r.Provider))
}

func ruleFailedAfterSideEffect(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil {
		return decision{}, false
	}
	tools := d.sideEffects(r)
	if len(tools) == 0 {
		return decision{}, false
	}
	return decide(apitype.ActionResolveManually, cmdRead(token(r.ID)), "Run %s failed (%s) after side-effecting tool %q settled, so a resend could repeat it; read what happened and finish by hand.", token(r.ID), errorClass(r), tools[0])
}

// retryAt is when a resend of a run that failed in a retryable class may
// succeed.
func (d *diagnosis) retryAt(r *belay.Run) time.Time {
	if t := d.in.Facts[r.ID].RetryAt; !t.IsZero() {
		return t
	}
	end := r.EndedAt
	if end.IsZero() {
		end = r.UpdatedAt
	}
	if end.IsZero() {
		return time.Time{}
	}
	return end.Add(d.th.RetryBackoff)
}

func ruleFailedBackoff(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil || !failedClass(r).Retryable() {
		return decision{}, false
	}
	at := d.retryAt(r)
	if !d.now.Before(at) {
		return decision{}, false
	}
	var dec decision
	if !d.in.Facts[r.ID].RetryAt.IsZero() {
		dec, _ = decide(apitype.ActionRetryLater, cmdRetry(token(r.ID)), "Run %s failed with %s; the provider asked to wait %s more before a resend.", token(r.ID), errorClass(r), age(at.Sub(d.now)))
	} else {
		// The provider named no time: the wait is the doctor's default
		// backoff, and saying the provider needs it would claim more than
		// anyone knows.
		dec, _ = decide(apitype.ActionRetryLater, cmdRetry(token(r.ID)), "Run %s failed with %s, which may clear by itself; the provider named no time to wait, so wait about %s more (the doctor's default backoff) before a resend, or resend now if the cause has cleared.", token(r.ID), errorClass(r), age(at.Sub(d.now)))
	}
	dec.retryAt = at
	return dec, true
}

func ruleFailedResendable(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil {
		return decision{}, false
	}
	switch c := failedClass(r); {
	case c.Retryable(), c == belay.ClassTimeout, c == belay.ClassInternal:
		return decide(apitype.ActionResend, cmdRetry(token(r.ID)), "Run %s failed with %s and no side-effecting tool call settled in it, so resending it is safe.", token(r.ID), errorClass(r))
	}
	return decision{}, false
}

func ruleFailedOther(d *diagnosis) (decision, bool) {
	r := d.failed()
	if r == nil {
		return decision{}, false
	}
	return decide(apitype.ActionResolveManually, cmdRead(token(r.ID)), "Run %s failed with %s, which a resend would repeat; read the error, change the request or the setup, then send again.", token(r.ID), errorClass(r))
}

// ruleUnsettled: the deliveries the runtime posts itself when a run ends
// (belay.OutcomeType) are notifications for a consumer that wants them,
// not work for the person reading the doctor. They never decide the next
// action: the outcome rules do.
func ruleUnsettled(d *diagnosis) (decision, bool) {
	var work []belay.Delivery
	for _, dl := range d.unsettled {
		if !belay.OutcomeType(dl.Type) {
			work = append(work, dl)
		}
	}
	if len(work) == 0 {
		return decision{}, false
	}
	n := len(work)
	var leased, waiting *belay.Delivery
	for i := range work {
		dl := &work[i]
		switch {
		case dl.Status == belay.DeliveryLeased && !dl.Lease.Expired(d.now):
			if leased == nil {
				leased = dl
			}
		case dl.Status != belay.DeliveryLeased && d.now.Before(dl.NotBefore):
			if waiting == nil {
				waiting = dl
			}
		case dl.To != "": // deliverable now, to its addressee only
			return decide(apitype.ActionAckDelivery, cmdInboxPollTo(token(dl.To)), "Wake-up %s for %s is not delivered: start the agent's MCP server (belay mcp) and subscribe to the run again, or poll and ack it by hand.", token(dl.ID), token(dl.To))
		default: // deliverable now
			return decide(apitype.ActionAckDelivery, cmdInboxPoll(d.sid), "%d inbox item(s) are unsettled, first %s (%s); poll, handle and ack them.", n, token(dl.ID), token(dl.Type))
		}
	}
	if leased != nil {
		return decide(apitype.ActionAckDelivery, cmdInboxAck(token(leased.ID), leased.Lease.Epoch), "Inbox item %s (%s) is leased to %s until %s; ack it once it is handled.",
			token(leased.ID), token(leased.Type), token(leased.Lease.Owner), stamp(leased.Lease.ExpiresAt))
	}
	if waiting.To != "" {
		return decide(apitype.ActionAckDelivery, cmdInboxPollTo(token(waiting.To)), "Wake-up %s for %s is due again at %s; the agent's MCP server sends it when a client of it subscribes to the run.", token(waiting.ID), token(waiting.To), stamp(waiting.NotBefore))
	}
	return decide(apitype.ActionAckDelivery, cmdInboxPoll(d.sid), "Inbox item %s (%s) is due again at %s; poll, handle and ack it then.", token(waiting.ID), token(waiting.Type), stamp(waiting.NotBefore))
}

func ruleComplete(d *diagnosis) (decision, bool) {
	if d.active != nil || d.last == nil || d.lastSt != belay.RunComplete {
		return decision{}, false
	}
	id := token(d.last.ID)
	return decide(apitype.ActionReadResult, cmdRead(id), "Run %s completed; read its result.", id)
}

func ruleCancelled(d *diagnosis) (decision, bool) {
	if d.active != nil || d.last == nil || d.lastSt != belay.RunCancelled {
		return decision{}, false
	}
	return decide(apitype.ActionNone, "", "Run %s was cancelled and nothing else is pending.", token(d.last.ID))
}

func ruleIdle(d *diagnosis) (decision, bool) {
	if len(d.runs) == 0 {
		return decide(apitype.ActionNone, "", "The session has no runs and nothing pending.")
	}
	return decide(apitype.ActionNone, "", "The session is idle with nothing pending.")
}

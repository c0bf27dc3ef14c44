package doctor

// Action is the one thing to do next about a session: the stable nextAction
// enum of DESIGN section 6.
type Action string

// Actions, in the order of DESIGN section 6.
const (
	// ActionNone: nothing to do.
	ActionNone Action = "none"
	// ActionWait: a run is queued or quiet but alive; wait for it.
	ActionWait Action = "wait"
	// ActionWatch: a run is making progress; follow it.
	ActionWatch Action = "watch"
	// ActionReadResult: the last run completed; read its answer.
	ActionReadResult Action = "read_result"
	// ActionAckDelivery: an inbox item is unsettled; poll and ack it.
	ActionAckDelivery Action = "ack_delivery"
	// ActionResend: the last run failed in a way a resend may fix, and no
	// side-effecting tool call settled in it.
	ActionResend Action = "resend"
	// ActionResolveManually: belay cannot safely continue on its own (a
	// side effect settled, or the request itself is at fault).
	ActionResolveManually Action = "resolve_manually"
	// ActionReauth: the provider refused the credentials.
	ActionReauth Action = "reauth"
	// ActionSolveChallenge: the provider shows a challenge (captcha, login
	// wall) a person must solve.
	ActionSolveChallenge Action = "solve_challenge"
	// ActionRetryLater: nothing can succeed now; run the command after
	// Report.RetryAt (or once the condition in the reason clears).
	ActionRetryLater Action = "retry_later"
	// ActionStartDaemon: work is pending and no daemon runs it.
	ActionStartDaemon Action = "start_daemon"
	// ActionRepairJournal: the journal is damaged before its tail and the
	// session is quarantined (read-only).
	ActionRepairJournal Action = "repair_journal"
	// ActionReleaseStaleLock: the data-dir lock is held by a dead owner and
	// no daemon answers.
	ActionReleaseStaleLock Action = "release_stale_lock"
	// ActionReattach: a run is in flight but its lease owner is dead; a live
	// daemon must reclaim it and reattach to the provider.
	ActionReattach Action = "reattach"
	// ActionPrune: the session is past its retention age; prune deletes it.
	ActionPrune Action = "prune"
)

// Actions returns every action in enum order.
func Actions() []Action {
	return []Action{
		ActionNone, ActionWait, ActionWatch, ActionReadResult, ActionAckDelivery,
		ActionResend, ActionResolveManually, ActionReauth, ActionSolveChallenge,
		ActionRetryLater, ActionStartDaemon, ActionRepairJournal,
		ActionReleaseStaleLock, ActionReattach, ActionPrune,
	}
}

// Valid reports whether a is one of the enum values.
func (a Action) Valid() bool {
	switch a {
	case ActionNone, ActionWait, ActionWatch, ActionReadResult, ActionAckDelivery,
		ActionResend, ActionResolveManually, ActionReauth, ActionSolveChallenge,
		ActionRetryLater, ActionStartDaemon, ActionRepairJournal,
		ActionReleaseStaleLock, ActionReattach, ActionPrune:
		return true
	}
	return false
}

// Severity grades a diagnostic.
type Severity string

// Severities.
const (
	SeverityInfo  Severity = "info"
	SeverityWarn  Severity = "warn"
	SeverityError Severity = "error"
)

// Valid reports whether s is a known severity.
func (s Severity) Valid() bool {
	return s == SeverityInfo || s == SeverityWarn || s == SeverityError
}

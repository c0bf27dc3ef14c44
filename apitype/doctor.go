package apitype

import "time"

// DoctorSchema is the version of the DoctorReport JSON schema. Fields may be
// added within a version; none is renamed or changes meaning.
const DoctorSchema = 1

// DoctorReport is the diagnosis of one session. Its JSON form is a stable
// contract (docs/doctor.md). It holds no prompt or answer text.
type DoctorReport struct {
	Schema      int       `json:"schema"`
	GeneratedAt time.Time `json:"generatedAt"`

	Session  string `json:"session"`
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	State    string `json:"state"`
	// Problem says why a quarantined session is read-only (runtime text,
	// scrubbed and truncated).
	Problem   string    `json:"problem,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	Ref       DoctorRef `json:"ref"`
	// Browser is the binding of a browser session.
	Browser *BrowserReport `json:"browser,omitempty"`

	Offline bool           `json:"offline"`
	Daemon  DaemonReport   `json:"daemon"`
	Lock    *LockReport    `json:"lock,omitempty"`
	Journal *JournalReport `json:"journal,omitempty"`

	// ActiveRun is the queued or running run the session is busy with.
	ActiveRun *RunReport `json:"activeRun,omitempty"`
	// LastRun is the most recent finished run.
	LastRun *RunReport `json:"lastRun,omitempty"`
	// LastActivity is the active run's last progress event, when known.
	LastActivity           time.Time `json:"lastActivity,omitzero"`
	LastActivityAgeSeconds *int64    `json:"lastActivityAgeSeconds,omitempty"`
	// Lease is the active run's lease.
	Lease *LeaseReport `json:"lease,omitempty"`

	Runs       RunCounts        `json:"runs"`
	Deliveries DeliveryCounts   `json:"deliveries"`
	Unsettled  []DeliveryReport `json:"unsettled"`
	// PruneAt is when the session becomes eligible for pruning, when all
	// its runs are finished and its deliveries settled.
	PruneAt time.Time `json:"pruneAt,omitzero"`

	Diagnostics []Diagnostic `json:"diagnostics"`

	NextAction DoctorAction `json:"nextAction"`
	// Reason is one sentence saying why NextAction.
	Reason string `json:"reason"`
	// Command is the exact command to run, "" for none.
	Command string `json:"command"`
	// RetryAt is when to run Command for retry_later, when known.
	RetryAt time.Time `json:"retryAt,omitzero"`
	// Rule names the decision-table rule that chose NextAction.
	Rule string `json:"rule"`
}

// DoctorRef is a redacted belay.ConversationRef.
type DoctorRef struct {
	Kind string `json:"kind,omitempty"`
	// ID and Target are shortened; URL keeps scheme, host and a shortened
	// path (no user info, query or fragment).
	ID        string `json:"id,omitempty"`
	URL       string `json:"url,omitempty"`
	Target    string `json:"target,omitempty"`
	HasCursor bool   `json:"hasCursor"`
}

// DaemonReport says whether a daemon answered.
type DaemonReport struct {
	Reachable   bool   `json:"reachable"`
	Incarnation string `json:"incarnation,omitempty"`
}

// Lock states in LockReport.State.
const (
	LockFree  = "free"
	LockHeld  = "held"
	LockStale = "stale"
)

// LockReport is the data-dir lock inspection.
type LockReport struct {
	Path string `json:"path,omitempty"`
	// State is free, held or stale.
	State  string        `json:"state"`
	Reason string        `json:"reason"`
	Stale  bool          `json:"stale"`
	Alive  bool          `json:"alive"`
	Local  bool          `json:"local"`
	Holder *HolderReport `json:"holder,omitempty"`
	Detail string        `json:"detail,omitempty"`
}

// HolderReport is the lock's owner record.
type HolderReport struct {
	PID         int       `json:"pid"`
	Host        string    `json:"host"`
	Purpose     string    `json:"purpose,omitempty"`
	Incarnation string    `json:"incarnation,omitempty"`
	AcquiredAt  time.Time `json:"acquiredAt,omitzero"`
	HeartbeatAt time.Time `json:"heartbeatAt,omitzero"`
	ExpiresAt   time.Time `json:"expiresAt,omitzero"`
}

// JournalReport is what opening the journal found.
type JournalReport struct {
	Path             string `json:"path,omitempty"`
	Quarantined      bool   `json:"quarantined"`
	QuarantineOffset int64  `json:"quarantineOffset,omitempty"`
	LastGoodSeq      uint64 `json:"lastGoodSeq,omitempty"`
	BrokenCopy       string `json:"brokenCopy,omitempty"`
	// Missing and Empty: the journal file is gone or holds no event.
	Missing bool `json:"missing,omitempty"`
	Empty   bool `json:"empty,omitempty"`
	// DiskFull and FreeBytes: the last write failed on a full disk.
	DiskFull  bool  `json:"diskFull,omitempty"`
	FreeBytes int64 `json:"freeBytes,omitempty"`
	// WriteError: the last write failed (not damage; it heals).
	WriteError string `json:"writeError,omitempty"`
	// OpenError: the journal could not be read, and not because its
	// bytes are damaged (a permission, an I/O error).
	OpenError string `json:"openError,omitempty"`
}

// RunReport describes one run.
type RunReport struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Phase      string `json:"phase"`
	Attempt    int    `json:"attempt"`
	Epoch      uint64 `json:"epoch"`
	ErrorClass string `json:"errorClass,omitempty"`
	// SideEffects names side-effecting tools that settled in the turn.
	SideEffects []string  `json:"sideEffects,omitempty"`
	CreatedAt   time.Time `json:"createdAt,omitzero"`
	StartedAt   time.Time `json:"startedAt,omitzero"`
	EndedAt     time.Time `json:"endedAt,omitzero"`
	Deadline    time.Time `json:"deadline,omitzero"`
}

// Lease owner states in LeaseReport.OwnerState.
const (
	OwnerAlive   = "alive"
	OwnerDead    = "dead"
	OwnerUnknown = "unknown"
)

// LeaseReport is the active run's lease.
type LeaseReport struct {
	Owner     string    `json:"owner"`
	Epoch     uint64    `json:"epoch"`
	GrantedAt time.Time `json:"grantedAt,omitzero"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	Expired   bool      `json:"expired"`
	// OwnerState is alive, dead or unknown; OwnerDetail says why.
	OwnerState  string `json:"ownerState"`
	OwnerDetail string `json:"ownerDetail"`
}

// RunCounts counts the session's runs by status.
type RunCounts struct {
	Total     int `json:"total"`
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Complete  int `json:"complete"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Stranded  int `json:"stranded"`
}

// DeliveryCounts counts the session's deliveries by status.
type DeliveryCounts struct {
	Total     int `json:"total"`
	Unsettled int `json:"unsettled"`
	Pending   int `json:"pending"`
	Leased    int `json:"leased"`
	Done      int `json:"done"`
	Error     int `json:"error"`
}

// DeliveryReport describes one unsettled delivery (never its data).
type DeliveryReport struct {
	ID             string    `json:"id"`
	Type           string    `json:"type"`
	Status         string    `json:"status"`
	Priority       int       `json:"priority"`
	Seq            uint64    `json:"seq"`
	Epoch          uint64    `json:"epoch"`
	Attempts       int       `json:"attempts"`
	LeaseOwner     string    `json:"leaseOwner,omitempty"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt,omitzero"`
	NotBefore      time.Time `json:"notBefore,omitzero"`
	CreatedAt      time.Time `json:"createdAt,omitzero"`
	// To is the consumer an addressed item (an MCP wake-up) is for, and
	// AfterRun the run whose end it waits for.
	To       string `json:"to,omitempty"`
	AfterRun string `json:"afterRun,omitempty"`
}

// Diagnostic is one finding.
type Diagnostic struct {
	// Code is a stable snake_case identifier (docs/doctor.md).
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
}

// DoctorAction is the one thing to do next about a session: the stable
// nextAction enum of DESIGN section 6.
type DoctorAction string

// Actions, in the order of DESIGN section 6.
const (
	// ActionNone: nothing to do.
	ActionNone DoctorAction = "none"
	// ActionWait: a run is queued or quiet but alive; wait for it.
	ActionWait DoctorAction = "wait"
	// ActionWatch: a run is making progress; follow it.
	ActionWatch DoctorAction = "watch"
	// ActionReadResult: the last run completed; read its answer.
	ActionReadResult DoctorAction = "read_result"
	// ActionAckDelivery: an inbox item is unsettled; poll and ack it.
	ActionAckDelivery DoctorAction = "ack_delivery"
	// ActionResend: the last run failed in a way a resend may fix, and no
	// side-effecting tool call settled in it.
	ActionResend DoctorAction = "resend"
	// ActionResolveManually: belay cannot safely continue on its own (a
	// side effect settled, or the request itself is at fault).
	ActionResolveManually DoctorAction = "resolve_manually"
	// ActionReauth: the provider refused the credentials.
	ActionReauth DoctorAction = "reauth"
	// ActionSolveChallenge: the provider shows a challenge (captcha, login
	// wall) a person must solve.
	ActionSolveChallenge DoctorAction = "solve_challenge"
	// ActionRetryLater: nothing can succeed now; run the command after
	// DoctorReport.RetryAt (or once the condition in the reason clears).
	ActionRetryLater DoctorAction = "retry_later"
	// ActionStartDaemon: work is pending and no daemon runs it.
	ActionStartDaemon DoctorAction = "start_daemon"
	// ActionRepairJournal: the journal is damaged before its tail and the
	// session is quarantined (read-only).
	ActionRepairJournal DoctorAction = "repair_journal"
	// ActionReleaseStaleLock: the data-dir lock is held by a dead owner and
	// no daemon answers.
	ActionReleaseStaleLock DoctorAction = "release_stale_lock"
	// ActionReattach: a run is in flight but its lease owner is dead; a live
	// daemon must reclaim it and reattach to the provider.
	ActionReattach DoctorAction = "reattach"
	// ActionPrune: the session is past its retention age; prune deletes it.
	ActionPrune DoctorAction = "prune"
)

// DoctorActions returns every action in enum order.
func DoctorActions() []DoctorAction {
	return []DoctorAction{
		ActionNone, ActionWait, ActionWatch, ActionReadResult, ActionAckDelivery,
		ActionResend, ActionResolveManually, ActionReauth, ActionSolveChallenge,
		ActionRetryLater, ActionStartDaemon, ActionRepairJournal,
		ActionReleaseStaleLock, ActionReattach, ActionPrune,
	}
}

// Valid reports whether a is one of the enum values.
func (a DoctorAction) Valid() bool {
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

// BrowserReport is the binding of a browser session (a ref of kind
// "browser"): the site, how far the send got, the target and the
// conversation, and the page state the last failure showed. It holds no
// prompt or answer text.
type BrowserReport struct {
	Site string `json:"site"`
	// SendPhase is open (nothing typed), intent (the prompt may have been
	// sent), sent (verified: never sent again) or done.
	SendPhase       string `json:"sendPhase"`
	ConversationURL string `json:"conversationUrl,omitempty"`
	Target          string `json:"target,omitempty"`
	// BrowserPID is the run's browser process (started detached).
	BrowserPID int `json:"browserPid,omitempty"`
	// Rebinds counts reopenings of the conversation in a new tab or
	// browser after the bound target was lost.
	Rebinds int `json:"rebinds,omitempty"`
	// PageState is what the last failure of the session's run says the
	// page showed: login_required, challenge_blocking, rate_limited,
	// transient_outage, unknown (UI drift), target_lost; "" if none.
	PageState string `json:"pageState,omitempty"`
	// The seed profile of the site, as the command line sees it in the
	// data directory (the pure diagnosis cannot): when a login last
	// finished, its age, and whether a login holds its lock now.
	SeedLoggedAt   time.Time `json:"seedLoggedAt,omitzero"`
	SeedAgeSeconds *int64    `json:"seedAgeSeconds,omitempty"`
	SeedLock       string    `json:"seedLock,omitempty"`
}

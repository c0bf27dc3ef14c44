package doctor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/lock"
)

// Diagnose judges a session and says what to do next. It is pure: no I/O,
// no clock, no goroutines; the same Input gives the same Report. It never
// panics on inconsistent input (unknown statuses, missing times): it
// reports what it cannot judge as a diagnostic.
func Diagnose(in Input) apitype.DoctorReport {
	d := newDiagnosis(in)
	d.describe()
	d.findings()
	for _, r := range rules {
		if dec, ok := r.match(d); ok {
			d.rep.NextAction, d.rep.Reason, d.rep.Command = dec.action, dec.reason, dec.command
			d.rep.RetryAt = utc(dec.retryAt)
			d.rep.Rule = r.name
			break
		}
	}
	if d.rep.Browser = d.browserReport(); d.rep.Browser != nil {
		if action, cmd, reason := d.browserCommand(d.rep.Browser, d.failed(), d.rep.Rule, d.rep.NextAction, d.rep.Reason); cmd != "" {
			d.rep.NextAction, d.rep.Command, d.rep.Reason = action, cmd, reason
		}
	}
	return d.rep
}

// diagnosis is the facts derived from an Input, shared by the rules.
type diagnosis struct {
	in  Input
	now time.Time
	th  Thresholds

	sid    string      // redacted session id
	runs   []belay.Run // creation order
	status []belay.RunStatus
	active *belay.Run // the running (else queued) run the session is busy with
	last   *belay.Run // the newest finished run
	lastSt belay.RunStatus
	// browserRun is the run the session's browser binding is of, and
	// browserProvider its provider (the name the browser commands take);
	// browserURL the start URL it was sent with (--site-url), when the
	// report may show it, browserURLHidden when it may not.
	browserRun       string
	browserProvider  string
	browserURL       string
	browserURLHidden bool

	down      bool   // no daemon answered
	lockState string // "", free, held, stale

	ownerState, ownerDetail string // of the active run's lease
	activity                time.Time
	quietFor                time.Duration
	quiet                   bool

	unsettled []belay.Delivery // delivery order
	prunable  bool
	pruneAge  time.Duration // idle time, when prunable
	pruneKeep time.Duration
	pruneWhat string // "complete" or "failed"

	rep apitype.DoctorReport
}

func newDiagnosis(in Input) *diagnosis {
	in.Retention = in.Retention.WithDefaults()
	d := &diagnosis{in: in, now: in.Now, th: in.Thresholds.withDefaults()}
	d.sid = token(in.Session.ID)
	d.down = !in.Daemon.Reachable
	if st := in.Daemon.Lock; st != nil {
		switch {
		case st.Free():
			d.lockState = apitype.LockFree
		case st.Stale:
			d.lockState = apitype.LockStale
		default:
			d.lockState = apitype.LockHeld
		}
	}

	d.runs = slices.Clone(in.Runs)
	slices.SortStableFunc(d.runs, func(a, b belay.Run) int { return a.CreatedAt.Compare(b.CreatedAt) })
	d.status = make([]belay.RunStatus, len(d.runs))
	var queued *belay.Run
	for i := range d.runs {
		r := &d.runs[i]
		s := effectiveStatus(r)
		d.status[i] = s
		switch {
		case s == belay.RunRunning && d.active == nil:
			d.active = r
		case s == belay.RunQueued && (queued == nil || r.Priority > queued.Priority):
			queued = r
		case s.Terminal():
			d.last, d.lastSt = r, s
		}
	}
	if d.active == nil {
		d.active = queued
	}

	if r := d.active; r != nil && effectiveStatus(r) == belay.RunRunning {
		d.ownerState, d.ownerDetail = d.judgeOwner(r)
		if t := in.Facts[r.ID].LastActivity; !t.IsZero() {
			d.activity = t
			d.quietFor = max(d.now.Sub(t), 0)
			d.quiet = d.quietFor > d.th.Quiet
		}
	}

	ended := map[string]bool{}
	for i, r := range d.runs {
		ended[r.ID] = d.status[i].Terminal()
	}
	for _, dl := range in.Deliveries {
		// An item held back until a run ends is not due while it runs.
		if !dl.Status.Settled() && (dl.AfterRun == "" || ended[dl.AfterRun]) {
			d.unsettled = append(d.unsettled, dl)
		}
	}
	slices.SortStableFunc(d.unsettled, func(a, b belay.Delivery) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	d.judgeRetention()
	return d
}

// effectiveStatus is the run's status, or the one its phase implies when
// the status is unknown; "" when neither is known.
func effectiveStatus(r *belay.Run) belay.RunStatus {
	if r.Status.Valid() {
		return r.Status
	}
	return r.Phase.Status()
}

// ownedBy reports whether a lease owner is incarnation inc or a worker of it.
func ownedBy(owner, inc string) bool {
	if inc == "" || !strings.HasPrefix(owner, inc) {
		return false
	}
	rest := owner[len(inc):]
	return rest == "" || rest[0] == '/' || rest[0] == ':'
}

// judgeOwner says whether the owner of a running run's lease is alive (G6).
func (d *diagnosis) judgeOwner(r *belay.Run) (state, detail string) {
	l := r.Lease
	if l == nil {
		return apitype.OwnerDead, "no lease is held, so no worker is running it"
	}
	owner := token(l.Owner)
	if l.Expired(d.now) {
		return apitype.OwnerDead, fmt.Sprintf("the lease of %s expired at %s without renewal", owner, stamp(l.ExpiresAt))
	}
	if alive, ok := d.in.Daemon.OwnerAlive[l.Owner]; ok {
		if alive {
			return apitype.OwnerAlive, fmt.Sprintf("%s is reported alive", owner)
		}
		return apitype.OwnerDead, fmt.Sprintf("%s is reported dead", owner)
	}
	dm := d.in.Daemon
	if dm.Reachable && dm.Incarnation != "" {
		if ownedBy(l.Owner, dm.Incarnation) {
			return apitype.OwnerAlive, fmt.Sprintf("%s belongs to the running daemon", owner)
		}
		return apitype.OwnerDead, fmt.Sprintf("%s belongs to a previous daemon incarnation (the running one is %s)", owner, token(dm.Incarnation))
	}
	if !dm.Reachable {
		switch d.lockState {
		case apitype.LockStale:
			return apitype.OwnerDead, "the process that held the data dir is gone"
		case apitype.LockFree:
			return apitype.OwnerDead, "no process holds the data dir"
		case apitype.LockHeld:
			if h := dm.Lock.Holder; h != nil && ownedBy(l.Owner, h.Incarnation) {
				return apitype.OwnerAlive, fmt.Sprintf("%s belongs to the live data-dir lock holder (pid %d)", owner, h.PID)
			}
		}
	}
	return apitype.OwnerUnknown, fmt.Sprintf("cannot tell whether %s is alive", owner)
}

// judgeRetention mirrors store.Prune's verdict (G12): no unfinished run, no
// unsettled delivery (but an outcome notice nobody took,
// belay.Delivery.HoldsRetention), none settled within the grace period, not
// quarantined, and idle longer than the age for the worst outcome. Idle
// time counts from the latest time known, so the doctor never advises a
// prune the store would refuse.
func (d *diagnosis) judgeRetention() {
	in := d.in
	if in.Session.State == belay.SessionQuarantined || in.Journal.Quarantined {
		return
	}
	for i := range d.unsettled {
		if d.unsettled[i].HoldsRetention() {
			return
		}
	}
	p := in.Retention
	keep, what := p.KeepComplete, "complete"
	last := latest(in.Session.UpdatedAt, in.LastEventAt)
	for i := range d.runs {
		r := &d.runs[i]
		switch s := d.status[i]; {
		case !s.Terminal():
			return
		case s == belay.RunFailed || s == belay.RunStranded:
			keep, what = p.KeepFailed, "failed"
		}
		last = latest(last, r.UpdatedAt, r.EndedAt)
	}
	eligible := time.Time{}
	for _, dl := range in.Deliveries {
		last = latest(last, dl.CreatedAt)
		eligible = latest(eligible, dl.SettledAt.Add(p.Grace))
	}
	if last.IsZero() {
		return
	}
	eligible = latest(eligible, last.Add(keep))
	d.rep.PruneAt = utc(eligible)
	d.pruneKeep, d.pruneWhat = keep, what
	if !d.now.Before(eligible) {
		d.prunable = true
		d.pruneAge = d.now.Sub(last)
	}
}

// describe fills in the report's description of the session.
func (d *diagnosis) describe() {
	in, s := d.in, d.in.Session
	rep := &d.rep
	rep.Schema = apitype.DoctorSchema
	rep.GeneratedAt = utc(d.now)
	rep.Session = d.sid
	rep.Provider = token(s.Provider)
	rep.Model = token(s.Model)
	rep.State = token(string(s.State))
	if s.Problem != "" {
		rep.Problem = scrubText(s.Problem)
	}
	rep.UpdatedAt = utc(s.UpdatedAt)
	rep.Ref = apitype.DoctorRef{
		Kind: token(s.Ref.Kind), ID: shorten(s.Ref.ID), URL: redactURL(s.Ref.URL),
		Target: shorten(s.Ref.Target), HasCursor: s.Ref.Cursor != "",
	}
	rep.Offline = in.Offline
	rep.Daemon = apitype.DaemonReport{Reachable: in.Daemon.Reachable, Incarnation: token(in.Daemon.Incarnation)}
	if st := in.Daemon.Lock; st != nil {
		rep.Lock = lockReport(st, d.lockState)
	}
	if j := in.Journal; j != (Journal{}) || s.State == belay.SessionQuarantined {
		rep.Journal = &apitype.JournalReport{
			Path: scrubText(j.Path), Quarantined: j.Quarantined || s.State == belay.SessionQuarantined,
			QuarantineOffset: j.QuarantineOffset, LastGoodSeq: j.LastGoodSeq, BrokenCopy: scrubText(j.BrokenCopy),
			DiskFull: j.DiskFull, FreeBytes: j.FreeBytes, WriteError: scrubText(j.WriteError),
			Missing: j.Missing, Empty: j.Empty, OpenError: scrubText(j.OpenError),
		}
	}

	if r := d.active; r != nil {
		rep.ActiveRun = d.runReport(r)
		if l := r.Lease; l != nil {
			rep.Lease = &apitype.LeaseReport{
				Owner: token(l.Owner), Epoch: l.Epoch, GrantedAt: utc(l.GrantedAt), ExpiresAt: utc(l.ExpiresAt),
				Expired: l.Expired(d.now), OwnerState: d.ownerState, OwnerDetail: d.ownerDetail,
			}
		}
	}
	if r := d.last; r != nil {
		rep.LastRun = d.runReport(r)
	}
	if !d.activity.IsZero() {
		rep.LastActivity = utc(d.activity)
		age := int64(d.quietFor / time.Second)
		rep.LastActivityAgeSeconds = &age
	}

	for _, st := range d.status {
		rep.Runs.Total++
		switch st {
		case belay.RunQueued:
			rep.Runs.Queued++
		case belay.RunRunning:
			rep.Runs.Running++
		case belay.RunComplete:
			rep.Runs.Complete++
		case belay.RunFailed:
			rep.Runs.Failed++
		case belay.RunCancelled:
			rep.Runs.Cancelled++
		case belay.RunStranded:
			rep.Runs.Stranded++
		}
	}
	for _, dl := range in.Deliveries {
		rep.Deliveries.Total++
		switch dl.Status {
		case belay.DeliveryPending:
			rep.Deliveries.Pending++
		case belay.DeliveryLeased:
			rep.Deliveries.Leased++
		case belay.DeliveryDone:
			rep.Deliveries.Done++
		case belay.DeliveryError:
			rep.Deliveries.Error++
		}
	}
	rep.Deliveries.Unsettled = len(d.unsettled)
	rep.Unsettled = []apitype.DeliveryReport{}
	for i, dl := range d.unsettled {
		if i == d.th.MaxUnsettled {
			break
		}
		dr := apitype.DeliveryReport{
			ID: token(dl.ID), Type: token(dl.Type), Status: token(string(dl.Status)), Priority: dl.Priority,
			Seq: dl.Seq, Epoch: dl.Epoch, Attempts: dl.Attempts, NotBefore: utc(dl.NotBefore), CreatedAt: utc(dl.CreatedAt),
			To: token(dl.To), AfterRun: token(dl.AfterRun),
		}
		if dl.Lease != nil {
			dr.LeaseOwner, dr.LeaseExpiresAt = token(dl.Lease.Owner), utc(dl.Lease.ExpiresAt)
		}
		rep.Unsettled = append(rep.Unsettled, dr)
	}
	rep.Diagnostics = []apitype.Diagnostic{}
}

func lockReport(st *lock.Status, state string) *apitype.LockReport {
	lr := &apitype.LockReport{
		Path: scrubText(st.Path), State: state, Reason: token(string(st.Reason)),
		Stale: st.Stale, Alive: st.Alive, Local: st.Local, Detail: scrubText(st.Detail),
	}
	if h := st.Holder; h != nil {
		lr.Holder = &apitype.HolderReport{
			PID: h.PID, Host: token(h.Host), Purpose: token(h.Purpose), Incarnation: token(h.Incarnation),
			AcquiredAt: utc(h.AcquiredAt), HeartbeatAt: utc(h.HeartbeatAt), ExpiresAt: utc(h.ExpiresAt),
		}
	}
	return lr
}

func (d *diagnosis) runReport(r *belay.Run) *apitype.RunReport {
	rr := &apitype.RunReport{
		ID: token(r.ID), Status: token(string(effectiveStatus(r))), Phase: token(string(r.Phase)),
		Attempt: r.Attempt, Epoch: r.Epoch, SideEffects: d.sideEffects(r),
		CreatedAt: utc(r.CreatedAt), StartedAt: utc(r.StartedAt), EndedAt: utc(r.EndedAt), Deadline: utc(r.Deadline),
	}
	if r.Error != nil {
		rr.ErrorClass = token(string(r.Error.Class))
	}
	return rr
}

// sideEffects names the side-effecting tools that settled in the run's
// turn: those the caller listed, then those its reason quotes.
func (d *diagnosis) sideEffects(r *belay.Run) []string {
	var out []string
	for _, n := range append(slices.Clone(d.in.Facts[r.ID].SideEffects), toolsInReason(r.Reason)...) {
		if n = token(n); n != "" && !slices.Contains(out, n) && len(out) < 8 {
			out = append(out, n)
		}
	}
	return out
}

func (d *diagnosis) add(code string, sev apitype.Severity, format string, args ...any) {
	d.rep.Diagnostics = append(d.rep.Diagnostics, apitype.Diagnostic{Code: code, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

// findings adds the diagnostics, in a fixed order.
func (d *diagnosis) findings() {
	in := d.in
	j := in.Journal
	if in.Session.State == belay.SessionQuarantined || j.Quarantined {
		if j.Quarantined {
			d.add("journal_quarantined", apitype.SeverityError, "the journal is damaged at byte %d after seq %d; the session is read-only and nothing was changed", j.QuarantineOffset, j.LastGoodSeq)
		} else {
			d.add("journal_quarantined", apitype.SeverityError, "the session is quarantined (read-only): %s", d.rep.Problem)
		}
	}
	if j.BrokenCopy != "" {
		d.add("torn_tail_cut", apitype.SeverityWarn, "a torn tail was cut from the journal; the original is kept at %s", scrubText(j.BrokenCopy))
	}

	if d.down {
		sev := apitype.SeverityInfo
		if d.active != nil {
			sev = apitype.SeverityWarn
		}
		d.add("daemon_unreachable", sev, "no daemon answered; this report was made from the files")
	}
	if st := in.Daemon.Lock; st != nil {
		switch {
		case d.lockState == apitype.LockStale:
			d.add("lock_stale", apitype.SeverityWarn, "the data-dir lock is stale (%s): %s", token(string(st.Reason)), scrubText(st.Detail))
		case d.lockState == apitype.LockHeld && d.down:
			d.add("lock_held_unresponsive", apitype.SeverityWarn, "the data dir is locked by a live process (%s) that does not answer as a daemon", holderText(st))
		case st.Reason == lock.ReasonMetadataInGrace:
			d.add("lock_in_grace", apitype.SeverityInfo, "the data-dir lock has no owner record yet; a process is taking it")
		}
	}

	running := 0
	for _, s := range d.status {
		if s == belay.RunRunning {
			running++
		}
	}
	if running > 1 {
		d.add("conversation_conflict", apitype.SeverityWarn, "%d runs are running at once; a session runs one at a time (G4)", running)
	}
	unknown := 0
	for _, s := range d.status {
		if s == "" {
			unknown++
		}
	}
	if unknown > 0 {
		d.add("unknown_status", apitype.SeverityWarn, "%d run(s) have an unknown status and were not judged", unknown)
	}

	if r := d.active; r != nil && effectiveStatus(r) == belay.RunRunning {
		id := token(r.ID)
		switch d.ownerState {
		case apitype.OwnerDead:
			d.add("lease_owner_dead", apitype.SeverityError, "run %s: %s", id, d.ownerDetail)
		case apitype.OwnerUnknown:
			d.add("lease_owner_unknown", apitype.SeverityInfo, "run %s: %s", id, d.ownerDetail)
		}
		f := in.Facts[r.ID]
		switch {
		case d.activity.IsZero():
			d.add("activity_unknown", apitype.SeverityInfo, "run %s: the time of its last progress event is not known", id)
		case d.quiet:
			d.add("run_quiet", apitype.SeverityInfo, "run %s: no progress for %s; a quiet run is not a failure, the watchdog judges it (G8)", id, age(d.quietFor))
		}
		if !f.InactivityDeadline.IsZero() && d.now.After(f.InactivityDeadline) {
			d.add("watchdog_overdue", apitype.SeverityWarn, "run %s: its inactivity deadline passed %s ago", id, age(d.now.Sub(f.InactivityDeadline)))
		}
		if !r.Deadline.IsZero() && d.now.After(r.Deadline) {
			d.add("deadline_passed", apitype.SeverityWarn, "run %s: its deadline passed %s ago", id, age(d.now.Sub(r.Deadline)))
		}
	}

	if r := d.last; r != nil {
		id := token(r.ID)
		switch d.lastSt {
		case belay.RunStranded:
			d.add("run_stranded", apitype.SeverityError, "run %s is stranded: it cannot be resent automatically (G9)", id)
		case belay.RunFailed:
			d.add("run_failed", apitype.SeverityError, "run %s failed with class %s", id, errorClass(r))
		}
		if tools := d.sideEffects(r); len(tools) > 0 {
			d.add("side_effects_settled", apitype.SeverityWarn, "run %s: side-effecting tool calls settled: %s", id, strings.Join(tools, ", "))
		}
	}

	// Outcome notices nobody took are not warned of: a session nobody
	// polls (the command line's) has one per run (HoldsRetention).
	held := 0
	for i := range d.unsettled {
		if d.unsettled[i].HoldsRetention() {
			held++
		}
	}
	if held > 0 {
		d.add("delivery_unsettled", apitype.SeverityWarn, "%d inbox item(s) are not settled", held)
	}
	for _, dl := range d.unsettled {
		if dl.Status == belay.DeliveryLeased && dl.Lease.Expired(d.now) {
			d.add("delivery_lease_expired", apitype.SeverityWarn, "delivery %s: its lease expired; it is redelivered", token(dl.ID))
		}
		if dl.To != "" {
			d.add("wake_undelivered", apitype.SeverityWarn, "wake-up %s for %s about run %s is not delivered yet (%d attempts): no client of that MCP server is connected and subscribed to the run",
				token(dl.ID), token(dl.To), token(dl.AfterRun), dl.Attempts)
		}
	}
	for _, dl := range d.in.Deliveries {
		if dl.To != "" && dl.Status == belay.DeliveryError {
			d.add("wake_missed", apitype.SeverityWarn, "wake-up %s for %s about run %s was given up at %s: %s", token(dl.ID), token(dl.To), token(dl.AfterRun), stamp(dl.SettledAt), scrubText(dl.Result))
		}
	}
	if d.prunable {
		d.add("retention_due", apitype.SeverityInfo, "the session is %s and idle for %s, past its retention of %s (G12)", d.pruneWhat, age(d.pruneAge), age(d.pruneKeep))
	}
}

func holderText(st *lock.Status) string {
	if h := st.Holder; h != nil {
		s := fmt.Sprintf("pid %d on host %s", h.PID, token(h.Host))
		if h.Purpose != "" {
			s += ", purpose " + token(h.Purpose)
		}
		return s
	}
	return "owner record " + token(string(st.Reason))
}

func errorClass(r *belay.Run) string {
	if r.Error == nil || r.Error.Class == "" {
		return "unknown"
	}
	return token(string(r.Error.Class))
}

// utc returns t in UTC, or the zero time.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func stamp(t time.Time) string { return utc(t).Format(time.RFC3339) }

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// age formats a duration for a reason: 45s, 12m, 5h, 15d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int64(d/time.Second), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	case d < 72*time.Hour:
		return fmt.Sprintf("%dh", int64(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int64(d/(24*time.Hour)))
}

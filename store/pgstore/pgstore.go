// Package pgstore is the PostgreSQL store: the same contract as fsstore
// (store.Store, proved by storetest), kept in a database that several
// belay nodes can share.
//
// Each session is a row in belay_sessions whose row lock is the session's
// mutex on every node: a state change locks it, appends the session's
// events with the next gap-free seqs (last_seq is the per-session
// counter), changes the run and delivery rows and commits, all in one
// transaction. Seqs are therefore committed in order, and a reader that
// sees seq n has seen every seq before it. Times (event stamps, lease
// grants and expiries, retry delays, retention ages) come from the
// database clock, now() of the transaction, never from a node's wall
// clock; tests inject a clock instead. Idempotency keys are unique
// constraints. WaitEvents is woken by LISTEN/NOTIFY, which is a hint: the
// tables are the truth and waiters re-read them (and poll them while the
// listening connection is down).
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/cmdline"
	"github.com/belayhq/belay/store"
)

var (
	_ store.Store            = (*Store)(nil)
	_ store.SessionDeleter   = (*Store)(nil)
	_ store.RunLister        = (*Store)(nil)
	_ store.RunStatusCounter = (*Store)(nil)
	_ store.AddressedLeaser  = (*Store)(nil)
)

// notifyChannel is the LISTEN/NOTIFY channel on which every commit names
// the session it appended to.
const notifyChannel = "belay_events"

// DefaultPollEvery bounds how long a waiter sleeps without a
// notification: the table is re-read at least this often, so a lost hint
// costs latency only.
const DefaultPollEvery = time.Second

// storeIDPrefix starts the idempotency ids of the store's own events, as in
// fsstore: callers may not use it.
const storeIDPrefix = "belay/"

// DefaultMaxConns is the connection pool's default size: enough for the
// runtime's concurrent writers on a small machine, well under
// PostgreSQL's default max_connections of 100 with a few nodes.
const DefaultMaxConns = 16

// IsURL reports whether s names a PostgreSQL database (postgres:// or
// postgresql://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Options configure Open. The zero value is usable.
type Options struct {
	// Clock, if set, replaces the database clock (tests). Production
	// leaves it nil: every time is the database's now().
	Clock clock.Clock
	// Migrate applies pending schema migrations on open (under the
	// migration advisory lock); otherwise Open refuses a database whose
	// schema is not current and names `belay migrate`.
	Migrate bool
	// PollEvery is how often waiters re-read without a notification
	// (DefaultPollEvery if 0).
	PollEvery time.Duration
	// MaxConns caps the connection pool (DefaultMaxConns if 0; the URL's
	// pool_max_conns wins over both).
	MaxConns int
	// KeepChanges is how many of the latest changes the change feed keeps
	// (DefaultKeepChanges if 0): a follower further behind gets
	// store.ErrCursorExpired and rereads the state it follows.
	KeepChanges int
	// WriteAlone gives every write its own transaction instead of
	// letting concurrent writes share one (combine.go): benchmarks
	// compare the two; production leaves it false.
	WriteAlone bool
}

// Store is the PostgreSQL store.
type Store struct {
	pool  *pgxpool.Pool
	clock clock.Clock
	url   string
	poll  time.Duration
	// keepChanges is how many changes the feed keeps; sinceTrim counts the
	// changes this node committed since it last trimmed the feed.
	keepChanges int64
	sinceTrim   atomic.Int64

	// runSessions and deliverySessions cache which session holds a run
	// or a delivery (it never changes), saving a lookup per write.
	idMu             sync.Mutex
	runSessions      map[string]string
	deliverySessions map[string]string

	notifyMu   sync.Mutex
	toNotify   map[string]struct{}
	notifyKick chan struct{}
	stopNotify context.CancelFunc
	notifyDone chan struct{}
	// seqMu makes this node's sequencer passes take turns, claimMu its
	// claims.
	seqMu, claimMu sync.Mutex
	// sequencedHook, if set (tests), is called in a sequencer pass after its
	// statement, before its commit lets the lock go.
	sequencedHook atomic.Pointer[func(n int64)]
	// sequenceDue asks the notifier to number committed changes, trimDue
	// to trim the change feed.
	sequenceDue, trimDue atomic.Bool

	// readyRepairedAt is when this node's claims last looked for runs
	// that should be marked ready (guarded by claimMu); readyRepaired
	// counts the marks they set (repairReady).
	readyRepairedAt time.Time
	readyRepaired   atomic.Int64
	// liveScanned is the set of live owners (their ids, sorted) when this
	// node's claims last looked through every running run for runs of
	// dead owners and found them all, and liveScannedAt when by the
	// database clock (guarded by claimMu; see rescuable). fullScans counts those looks.
	liveScanned   []string
	liveScannedAt time.Time
	fullScans     atomic.Int64

	// writeAlone turns shared transactions off (Options.WriteAlone).
	writeAlone bool
	// shareMu guards sharers, the writes waiting to share a transaction
	// (combine.go): Sync ones, then Buffered ones.
	shareMu sync.Mutex
	sharers [2]sharer
	// mergedAway counts the statements of shared transactions merged
	// into others (mergeQueued); mergeFailed the shared transactions
	// whose statements mergeQueued refused, sent unmerged.
	mergedAway, mergeFailed atomic.Int64

	// behindMu guards the write-behind queues by session (behind.go), the
	// errors kept for leases whose queued writes failed, and whether Close
	// refuses new ones.
	behindMu     sync.Mutex
	behind       map[string]*behindQueue
	behindErrs   map[string]leaseErr
	behindClosed bool

	mu      sync.Mutex
	closed  bool
	waiters map[string]map[*waiter]struct{}
	// feedWaiters wait for the change feed (WaitChanges).
	feedWaiters map[*waiter]struct{}
	// listening is true while the LISTEN connection is up; listenStarted
	// once it was started (lazily, by the first WaitEvents).
	listening     bool
	listenStarted bool
	stopListen    context.CancelFunc
	listenDone    chan struct{}
}

type waiter struct{ ch chan struct{} }

// Open connects to the database at url and checks (or, with
// Options.Migrate, brings up to date) its schema.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	pool, err := connect(ctx, url, opts.MaxConns)
	if err != nil {
		return nil, err
	}
	if opts.PollEvery <= 0 {
		opts.PollEvery = DefaultPollEvery
	}
	if opts.KeepChanges <= 0 {
		opts.KeepChanges = DefaultKeepChanges
	}
	s := &Store{pool: pool, clock: opts.Clock, url: url, poll: opts.PollEvery, keepChanges: int64(opts.KeepChanges),
		waiters: map[string]map[*waiter]struct{}{}, feedWaiters: map[*waiter]struct{}{},
		toNotify: map[string]struct{}{}, runSessions: map[string]string{}, deliverySessions: map[string]string{},
		behind: map[string]*behindQueue{}, behindErrs: map[string]leaseErr{}, notifyKick: make(chan struct{}, 1), notifyDone: make(chan struct{})}
	if opts.Migrate {
		if _, err := migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	st, err := status(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	switch {
	case len(st.Unknown) > 0:
		pool.Close()
		return nil, fmt.Errorf("pgstore: the database is at schema version %d, newer than this belay knows (%d); upgrade belay", st.Current, st.Latest)
	case len(st.Pending) > 0:
		pool.Close()
		return nil, fmt.Errorf("pgstore: the database schema is at version %d, this belay needs %d; run: belay migrate --store %s", st.Current, st.Latest, Redact(url))
	}
	s.sharers[0].d, s.sharers[1].d = belay.Sync, belay.Buffered
	s.readyRepairedAt = time.Now()
	s.writeAlone = opts.WriteAlone
	nctx, cancel := context.WithCancel(context.Background())
	s.stopNotify = cancel
	go s.notifier(nctx)
	return s, nil
}

// minServerVersion is the oldest PostgreSQL belay runs on (12); a
// variable for tests.
var minServerVersion = 120000

// connect opens a pool on url.
func connect(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: store URL %s: %v", belay.ErrInvalid, Redact(url), err)
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(maxConns)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "belay"
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	// belay's statements are short; JIT compiling one costs far more than
	// it saves (measured: a change-feed read whose estimate crossed
	// jit_above_cost took a second, all of it compiling).
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, wrapConn(err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if refused := refusal(err, cfg.ConnConfig, url); refused != nil {
			return nil, refused
		}
		return nil, wrapConn(fmt.Errorf("connect to %s: %w", Redact(url), err))
	}
	// Write transactions set plan_cache_mode (genericPlans), new in 12.
	var version int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		pool.Close()
		return nil, wrapConn(fmt.Errorf("connect to %s: %w", Redact(url), err))
	}
	if version < minServerVersion {
		pool.Close()
		return nil, fmt.Errorf("%w: %s is PostgreSQL %d.%d; belay needs PostgreSQL 12 or newer", belay.ErrInvalid, Redact(url), version/10000, version%10000)
	}
	return pool, nil
}

// refusal returns the error of a connection the server answered and
// refused for what the store URL says, not for being away: a database or
// role that does not exist, a password or pg_hba.conf rule that does not
// let the user in, a database the user may not connect to. Waiting does
// not fix those, so they are belay.ErrInvalid (a wrong store setting),
// not ErrUnreachable, and the message says what to change. It is nil for
// any other failure, and when any attempt of the connection (one per host
// of a multi-host URL, and per TLS mode) failed for being away: a host
// that refused a role while the next did not answer is an outage.
func refusal(err error, cc *pgx.ConnConfig, url string) error {
	pe := refusedBy(connectAttempts(err))
	if pe == nil {
		return nil
	}
	where := Redact(url)
	db := cc.Database
	if db == "" {
		db = cc.User // the server's default when the URL names none
	}
	switch pe.Code {
	case "3D000": // invalid_catalog_name
		// The URL's hosts: pgx lists each host once more per extra TLS
		// attempt (sslmode=prefer), as a fallback.
		var hosts, ports []string
		seen := map[string]bool{}
		for _, h := range append([]*pgconn.FallbackConfig{{Host: cc.Host, Port: cc.Port}}, cc.Fallbacks...) {
			if key := h.Host + ":" + strconv.Itoa(int(h.Port)); !seen[key] {
				seen[key] = true
				hosts, ports = append(hosts, h.Host), append(ports, strconv.Itoa(int(h.Port)))
			}
		}
		createdb := []string{"createdb", "-h", strings.Join(hosts, ","), "-p", strings.Join(ports, ","), "-U", cc.User, db}
		return fmt.Errorf("%w: database %q does not exist on the server of %s: create it (%s, or CREATE DATABASE %s), then run the same command again (belay serve creates belay's tables at start; belay migrate does only that)",
			belay.ErrInvalid, db, where, cmdline.Join(createdb...), pgx.Identifier{db}.Sanitize())
	case "28000", "28P01": // invalid_authorization_specification, invalid_password
		return fmt.Errorf("%w: the server of %s did not let user %q in: %s (SQLSTATE %s); fix the user or password of the store setting (--store, $BELAY_STORE or [store] url), or the server's pg_hba.conf",
			belay.ErrInvalid, where, cc.User, pe.Message, pe.Code)
	default: // 42501 insufficient_privilege: no CONNECT on the database
		return fmt.Errorf("%w: user %q may not connect to database %q on the server of %s: %s (SQLSTATE %s); GRANT CONNECT ON DATABASE %s TO %s, or use another user in the store setting",
			belay.ErrInvalid, cc.User, db, where, pe.Message, pe.Code, pgx.Identifier{db}.Sanitize(), pgx.Identifier{cc.User}.Sanitize())
	}
}

// connectAttempts returns the errors of each attempt of a failed
// connection: pgconn joins one per host (and per TLS mode) under its
// ConnectError.
func connectAttempts(err error) []error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return []error{err}
	}
	inner := ce.Unwrap()
	if j, ok := inner.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{inner}
}

// refusedBy returns the first refusal among a connection's attempts
// (SQLSTATE 3D000, 28000, 28P01 or 42501), or nil if there is none or if
// any attempt failed for the server being away (wrapConn's classes).
func refusedBy(attempts []error) *pgconn.PgError {
	var refused *pgconn.PgError
	for _, err := range attempts {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			switch pe.Code {
			case "3D000", "28000", "28P01", "42501":
				if refused == nil {
					refused = pe
				}
				continue
			}
		}
		if away(err) {
			return nil
		}
	}
	return refused
}

// away says a connection attempt failed for the server being away or
// busy, not for what it was asked: the network, a cut connection, a
// timeout, a server shutting down or starting up (SQLSTATE classes 57P
// and 08) or at its connection limit (53300).
func away(err error) bool {
	var ne net.Error
	var pe *pgconn.PgError
	return errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "08") || pe.Code == "53300")
}

// Redact returns a connection string without its password, wherever it
// is: the URL's user info (percent-encoded or not), a password query
// parameter, or a password=... keyword of the key/value form.
func Redact(conn string) string {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return dsnPassword.ReplaceAllString(conn, "${1}xxxxx")
}

// dsnPassword is the password of a key/value connection string, quoted or
// not.
var dsnPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// ErrUnreachable says the database could not be reached; nothing was
// written. Callers retry once it is back. It is belay.ErrStoreUnreachable,
// so that the API and the CLI name it without knowing this package.
var ErrUnreachable = belay.ErrStoreUnreachable

// wrapConn marks connection failures with ErrUnreachable: a connection
// that cannot be made, a network error, a connection cut mid-statement
// (EOF), and the server's own "shutting down", "starting up" and
// connection-exception errors (SQLSTATE classes 57P and 08).
func wrapConn(err error) error {
	if err == nil || errors.Is(err, ErrUnreachable) {
		return err
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "08")) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

// URL returns the (password-redacted) database URL.
func (s *Store) URL() string { return Redact(s.url) }

// Pool returns the connection pool (benchmarks and tests).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the listener and closes the pool. It is safe to call more
// than once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	// Queued writes first, while the store still writes (what cannot be
	// committed is lost, as in a crash; a buffered write may be).
	_ = s.flushAllBehind()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop, done := s.stopListen, s.listenDone
	for _, set := range s.waiters {
		fire(set)
	}
	fire(s.feedWaiters)
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	s.stopNotify()
	<-s.notifyDone
	s.pool.Close()
	return nil
}

// writable fails once the store is closed.
func (s *Store) writable() error {
	if s.isClosed() {
		return belay.ErrStoreClosed
	}
	return nil
}

// healthTimeout bounds Health's round trip to the database.
const healthTimeout = 2 * time.Second

// Health reports whether the store can be written now: nil, or why not,
// an error wrapping belay.ErrStoreUnreachable (the database does not
// answer) or belay.ErrStoreClosed. It costs one round trip.
func (s *Store) Health(ctx context.Context) error {
	if err := s.writable(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if err := s.pool.Ping(cctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s does not answer: %v", ErrUnreachable, s.URL(), err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// nowArg is the time argument of a statement: nil (the database's now())
// unless a clock is injected.
func (s *Store) nowArg() any {
	if s.clock == nil {
		return nil
	}
	return s.clock.Now().UTC()
}

// tx is one locked write to a session: the session row is locked, and the
// events emitted are appended with the next seqs at commit. Reads and
// writes whose results fn needs run at once on the connection; writes
// queued with queue ride in the commit's round trip.
type tx struct {
	*pgx.Conn
	ctx     context.Context
	session string
	// provider and model are the session's.
	provider, model string
	now             time.Time
	lastSeq         uint64
	evs             []belay.Event
	// changes are the change-feed rows of the state-changing events.
	changes []store.Change
	// changed says a store event was emitted (updated_at moves).
	changed bool
	// reready says the session's queued or running runs changed: which of
	// its runs is ready is set again at commit (refreshReady).
	reready bool
	// readyNew are the runs created queued behind nothing (not in front):
	// each is ready when its session has no other queued or running run
	// (set at commit by markReady, cheaper than refreshReady).
	readyNew []string
	// behindPhase is each run's last phase in the session's queued writes
	// this write carries (carryBehind): the run's phase as fn finds it.
	behindPhase map[string]belay.RunPhase
	// phaseSet are the runs whose row this write sets with their phase
	// (updateRun): a carried phase of theirs needs no update of its own.
	phaseSet []string
	// onEnd learns what came of the transaction once that is known: it
	// committed (true), or the server refused it and nothing of it
	// committed (false). It is not called when the outcome is unknown.
	onEnd func(committed bool)
	// executed counts the changes already sent by execute.
	executed int
	// deliveryKeys are the items (type, key) of the session read with
	// the lock (queueDeliveryKey): their ids, "" for none.
	deliveryKeys map[[2]string]string
	// final holds the queued statements sent with the commit.
	final pgx.Batch
	// returns are the runs final's statements return (returningRun), for
	// mergeQueued.
	returns map[*pgx.QueuedQuery]runOut
	// tail holds statements sent after the events are written (reads of
	// the final state).
	tail []func(b *pgx.Batch)
}

// queue adds a statement to the commit's round trip.
func (t *tx) queue(sql string, args ...any) *pgx.QueuedQuery { return t.final.Queue(sql, args...) }

// emit queues an event and returns its seq.
func (t *tx) emit(e belay.Event) (uint64, error) {
	if len(e.Data) == 0 {
		e.Data = json.RawMessage("null")
	}
	if err := checkSize(&e); err != nil {
		return 0, err
	}
	t.lastSeq++
	e.Seq, e.TS = t.lastSeq, t.now
	if belay.StoreEventType(e.Type) {
		t.changed = true
		if c := changeOf(t.session, &e); store.InFeed(c) {
			t.changes = append(t.changes, c)
		}
	}
	t.evs = append(t.evs, e)
	return e.Seq, nil
}

const lockSession = `SELECT last_seq, provider, model, coalesce($2::timestamptz, now()) FROM belay_sessions WHERE id = $1 FOR UPDATE`

// withSession runs fn in a transaction holding the session's row lock and
// commits fn's events with it (alone: see shared for writes that may
// share their transaction). A Buffered durability commits without
// waiting for the WAL flush (synchronous_commit off): a database crash may
// lose it, never reorder it.
//
// The transaction takes two round trips besides fn's own reads: BEGIN
// with the lock, and the queued writes with the events and COMMIT. A
// connection lost while COMMIT is in flight leaves the outcome unknown;
// the error wraps ErrUnreachable and a retry with the same idempotency
// key is safe.
func (s *Store) withSession(ctx context.Context, session string, d belay.Durability, fn func(t *tx) error) error {
	// The session's queued writes go first (behind.go). Their failure is
	// kept for their lease, not this write's: it goes on after them.
	if err := s.flushBehind(ctx, session); err != nil && ctx.Err() != nil {
		return err
	}
	return s.write(ctx, session, d, s.lockOpen(session), fn)
}

// lockOpen is the opening of a write to session: its row lock.
func (s *Store) lockOpen(session string) func(b *pgx.Batch, t *tx) {
	return s.lockThen(session, fmt.Errorf("%w: session %s", belay.ErrNotFound, session), nil)
}

// lockThen is the opening of a write to session: its row lock (missing
// is the error when the session is not there), then after's reads.
func (s *Store) lockThen(session string, missing error, after func(b *pgx.Batch, t *tx)) func(b *pgx.Batch, t *tx) {
	return func(b *pgx.Batch, t *tx) {
		b.Queue(lockSession, session, s.nowArg()).QueryRow(func(row pgx.Row) error {
			var lastSeq int64
			err := row.Scan(&lastSeq, &t.provider, &t.model, &t.now)
			if errors.Is(err, pgx.ErrNoRows) {
				return missing
			}
			t.lastSeq = uint64(lastSeq)
			return err
		})
		if after != nil {
			after(b, t)
		}
	}
}

// write runs one transaction: open queues what starts it (after BEGIN),
// fn does the work, and the commit round trip writes the rest.
func (s *Store) write(ctx context.Context, session string, d belay.Durability, open func(b *pgx.Batch, t *tx), fn func(t *tx) error) error {
	if err := s.writable(); err != nil {
		return err
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.wrap(err)
	}
	defer pc.Release()
	t := &tx{Conn: pc.Conn(), ctx: ctx, session: session}
	err = func() error {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(genericPlans)
		if d == belay.Buffered {
			b.Queue(`SET LOCAL synchronous_commit = off`)
		}
		open(b, t)
		if err := t.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		t.now = t.now.UTC()
		if err := fn(t); err != nil {
			return err
		}
		flushMany(&t.final, []*tx{t})
		for _, f := range t.tail {
			f(&t.final)
		}
		t.final.Queue(`COMMIT`)
		err := t.SendBatch(ctx, &t.final).Close()
		if committed, known := commitOutcome(t.Conn, err); known && t.onEnd != nil {
			t.onEnd(committed)
		}
		return err
	}()
	if err != nil {
		if !t.IsClosed() && t.PgConn().TxStatus() != 'I' {
			// A connection left in a transaction is closed by the pool on
			// release; roll back to keep it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = t.Exec(rctx, `ROLLBACK`)
			cancel()
		}
		return s.wrap(err)
	}
	s.committed(t.executed, session)
	return nil
}

// commitOutcome says what came of a transaction whose last batch, ending
// in COMMIT, returned err on conn: it committed, or nothing of it did
// (known), or its outcome is unknown. The batch ends with one Sync, so a
// statement the server refuses aborts the transaction and COMMIT is
// skipped.
func commitOutcome(conn *pgx.Conn, err error) (committed, known bool) {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return true, true
	case conn.IsClosed():
		// A FATAL error or a cut connection: COMMIT may have been carried
		// out before it.
		return false, false
	case errors.As(err, &pe):
		// The server refused a statement, or COMMIT.
		return false, true
	case conn.PgConn().TxStatus() == 'I':
		// A callback failed reading a result; the server committed.
		return true, true
	}
	// Still in the transaction (the batch never went out) or aborted.
	return false, true
}

// execute sends what t queued so far (its events, writes, tail reads and
// changes) inside the transaction, so that what fn reads next sees it.
func (s *Store) execute(t *tx) error {
	flushMany(&t.final, []*tx{t})
	for _, f := range t.tail {
		f(&t.final)
	}
	b := t.final
	t.final, t.tail = pgx.Batch{}, nil
	if len(b.QueuedQueries) == 0 {
		return nil
	}
	return t.SendBatch(t.ctx, &b).Close()
}

// txMark is what t had queued at a point, to drop what came after.
type txMark struct {
	queued, tail, evs, changes, readyNew, phaseSet int
	lastSeq                                        uint64
	changed, reready                               bool
}

func (t *tx) mark() txMark {
	return txMark{len(t.final.QueuedQueries), len(t.tail), len(t.evs), len(t.changes), len(t.readyNew), len(t.phaseSet), t.lastSeq, t.changed, t.reready}
}

// reset drops what t queued after m (nothing of it was sent).
func (t *tx) reset(m txMark) {
	clear(t.final.QueuedQueries[m.queued:])
	t.final.QueuedQueries = t.final.QueuedQueries[:m.queued]
	t.tail, t.evs, t.changes = t.tail[:m.tail], t.evs[:m.evs], t.changes[:m.changes]
	t.readyNew, t.phaseSet = t.readyNew[:m.readyNew], t.phaseSet[:m.phaseSet]
	t.lastSeq, t.changed, t.reready = m.lastSeq, m.changed, m.reready
}

// planRobust: the statements a write or a claim runs reach each row by
// its key, whatever the planner's statistics say. pgx prepares each
// statement once per connection and PostgreSQL then reuses one generic
// plan, made from the statistics of that moment: on a new database (every
// table empty and never analyzed) it chose a scan of the whole table for
// "id = ANY($1)" and for "UPDATE ... FROM unnest(...)", and kept it as
// the tables grew (a table-wide scan per statement, thousands of rows a
// run); with statistics taken while no run was queued, the claim's walk
// scanned every queued run per ready one. Two rules keep the plans by
// key. A set of rows is read through unnest and a LATERAL subquery by key
// (OFFSET 0 keeps it from being flattened into a join the planner may
// turn into a scan). And a write or claim transaction plans without
// sequential scans, hash joins or merge joins (genericPlans), so that a
// set of rows changed by one statement (UPDATE ... FROM unnest, by key:
// mergeQueued) is a nested loop over the set with an index lookup per
// row. Those settings only price the paths they name out (a scan with no
// index to use is still made), and every statement of these
// transactions reaches its rows by key or through an index.

// genericPlans opens a write or claim transaction's planning: its
// statements run on their cached generic plans, made without sequential
// scans, hash joins or merge joins (planRobust). Without
// force_generic_plan PostgreSQL plans a statement again on every call
// when the plan for the call's values looks cheaper than the generic one,
// as it does for a lookup of a set by key whose set it cannot size ahead
// (markReady, the fence read): planning cost more than running them. A
// statement's generic plan is made at its first call on a connection (and
// again after a change of its tables' statistics), with the settings of
// that moment; the statements that change sets of rows (SetStatements in
// the tests) run only in these transactions, so the settings hold for
// every call of theirs.
const genericPlans = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

// refreshReady is the statement that sets which queued run of each
// session of $1 is ready (belay_ready, migration 11): the session's next
// queued run (queuedOrder) while no run of it is running, and no other.
// It writes only what changes.
const refreshReady = `WITH want AS (
		SELECT h.id, c.session, h.priority, h.ord FROM unnest($1::text[]) AS c(session)
		CROSS JOIN LATERAL (SELECT n.id, n.priority, n.ord FROM belay_runs n
			WHERE n.session = c.session AND n.status = 'queued' ORDER BY ` + queuedOrder + ` LIMIT 1) h
		WHERE NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = c.session AND a.status = 'running' OFFSET 0)),
	gone AS (DELETE FROM belay_ready y WHERE y.ctid = ANY(ARRAY(
		SELECT x.ctid FROM unnest($1::text[]) AS c(session)
		CROSS JOIN LATERAL (SELECT ctid, run FROM belay_ready WHERE session = c.session OFFSET 0) x
		WHERE NOT EXISTS (SELECT 1 FROM want w WHERE w.id = x.run))))
	INSERT INTO belay_ready (run, session, priority, ord) SELECT id, session, priority, ord FROM want
	ON CONFLICT (run) DO NOTHING`

// markReady is the statement that makes each run of $1, just created
// queued and not in front, ready when its session has no other queued
// run and none running: refreshReady's outcome for a session whose only
// change is that run. Its subqueries are kept from being flattened into
// joins (OFFSET 0): on a new database, whose tables have no statistics
// yet, a cached plan of the joins scanned every queued run on each call;
// these are index lookups whatever the statistics.
const markReady = `INSERT INTO belay_ready (run, session, priority, ord)
	SELECT r.id, r.session, r.priority, r.ord FROM unnest($1::text[]) AS c(id)
	CROSS JOIN LATERAL (SELECT n.id, n.session, n.priority, n.ord FROM belay_runs n WHERE n.id = c.id OFFSET 0) r
	WHERE NOT EXISTS (SELECT 1 FROM belay_runs q WHERE q.session = r.session AND q.status = 'queued' AND q.id <> r.id OFFSET 0)
		AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running' OFFSET 0)
	ON CONFLICT (run) DO NOTHING`

// queueReady queues what sets the ready runs of ts's sessions: the
// refresh for sessions whose queued or running runs changed, or markReady
// for those whose only change is one new run.
func queueReady(b *pgx.Batch, ts ...*tx) {
	var sessions, runs []string
	for _, t := range ts {
		switch {
		case t.reready || len(t.readyNew) > 1:
			sessions = append(sessions, t.session)
		case len(t.readyNew) == 1:
			runs = append(runs, t.readyNew[0])
		}
		t.reready, t.readyNew = false, nil
	}
	if len(sessions) > 0 {
		b.Queue(refreshReady, sessions)
	}
	if len(runs) > 0 {
		b.Queue(markReady, runs)
	}
}

// setCounters sets sessions' counters: their ids, last seqs, the times
// and whether each changed state (updated_at moves).
const setCounters = `UPDATE belay_sessions s SET last_seq = k.last_seq, last_event_at = k.at,
		updated_at = CASE WHEN k.changed THEN k.at ELSE s.updated_at END
	FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::bool[]) AS k(id, last_seq, at, changed) WHERE s.id = k.id`

// flushMany queues on b what every tx of ts leaves for its commit: the
// ready marks of their sessions, their events and session counters (a
// statement each for all of ts), and their changes.
func flushMany(b *pgx.Batch, ts []*tx) {
	var sessions []string
	var seqs, epochs []int64
	var stamps []time.Time
	var types, idems, runs, data []string
	var counters []int64
	var counted []string
	var changedAt []bool
	var nows []time.Time
	var changes []store.Change
	queueReady(b, ts...)
	for _, t := range ts {
		changes = append(changes, t.changes...)
		if len(t.evs) == 0 {
			continue
		}
		for _, e := range t.evs {
			sessions, seqs, stamps, types = append(sessions, t.session), append(seqs, int64(e.Seq)), append(stamps, e.TS), append(types, e.Type)
			idems, runs, epochs, data = append(idems, e.ID), append(runs, e.Run), append(epochs, int64(e.Epoch)), append(data, string(e.Data))
		}
		counted, counters = append(counted, t.session), append(counters, int64(t.lastSeq))
		changedAt, nows = append(changedAt, t.changed), append(nows, t.now)
		t.evs = nil
	}
	if len(sessions) > 0 {
		b.Queue(`INSERT INTO belay_events (session, seq, ts, type, idem, run, epoch, data)
			SELECT session, seq, ts, type, NULLIF(idem, ''), NULLIF(run, ''), epoch, data::json
			FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[])
				AS e(session, seq, ts, type, idem, run, epoch, data)`,
			sessions, seqs, stamps, types, idems, runs, epochs, data)
		b.Queue(setCounters, counted, counters, nows, changedAt)
	}
	queueChanges(b, changes)
	for _, t := range ts {
		t.executed += len(t.changes)
		t.changes = nil
	}
}

// maxCachedIDs bounds each id -> session cache; a full cache starts over.
const maxCachedIDs = 1 << 16

func (s *Store) remember(m map[string]string, id, session string) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if len(m) >= maxCachedIDs {
		clear(m)
	}
	m[id] = session
}

func (s *Store) recall(m map[string]string, id string) (string, bool) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	session, ok := m[id]
	return session, ok
}

// committed announces a commit to sessions, with changes rows in the
// change feed: their waiters on this node are woken at once, those on
// other nodes by a NOTIFY sent after the commit. The NOTIFY is not part of
// the write's transaction: PostgreSQL serializes the commits of notifying
// transactions (a global lock held through the WAL flush), which would cap
// the whole database at one commit per fsync.
func (s *Store) committed(changes int, sessions ...string) {
	s.notifyMu.Lock()
	for _, id := range sessions {
		s.toNotify[id] = struct{}{}
	}
	s.notifyMu.Unlock()
	if changes > 0 {
		// The changes get their cursors from the notifier's sequencer.
		s.sequenceDue.Store(true)
	}
	for _, id := range sessions {
		s.wake(id)
	}
	select {
	case s.notifyKick <- struct{}{}:
	default:
	}
}

// notifier sends the pending NOTIFYs, many sessions in one statement. A
// failed send is dropped: notifications are hints, and waiters on other
// nodes re-read the tables at least every PollEvery.
func (s *Store) notifier(ctx context.Context) {
	defer close(s.notifyDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.notifyKick:
		}
		if s.sequenceDue.Swap(false) {
			// A failed pass leaves the rows to the next one, or to any
			// reader (readers number before they read).
			_, _ = s.sequence(ctx, false)
		}
		s.notifyMu.Lock()
		batch := make([]string, 0, len(s.toNotify))
		for id := range s.toNotify {
			batch = append(batch, id)
		}
		clear(s.toNotify)
		s.notifyMu.Unlock()
		if len(batch) > 0 {
			_, _ = s.pool.Exec(ctx, `SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, notifyChannel, batch)
		}
		if s.trimDue.Swap(false) {
			// A failed trim is tried again after the next changes; the
			// feed only grows meanwhile.
			_ = s.trimChanges(ctx)
		}
	}
}

// wrap maps database errors onto belay's sentinels.
func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "22P02", "22023", "23514", "22001", "54000":
			return fmt.Errorf("%w: %s", belay.ErrInvalid, pe.Message)
		}
	}
	if errors.Is(err, pgx.ErrTxClosed) || s.isClosed() {
		return fmt.Errorf("%w: %v", belay.ErrStoreClosed, err)
	}
	return wrapConn(err)
}

// WaitEvents blocks until the session has an event after seq after.
func (s *Store) WaitEvents(ctx context.Context, id string, after uint64) error {
	if err := checkSession(id); err != nil {
		return err
	}
	w, err := s.addWaiter(id)
	if err != nil {
		return err
	}
	defer s.dropWaiter(id, w)
	for {
		var last int64
		err := s.pool.QueryRow(ctx, `SELECT last_seq FROM belay_sessions WHERE id = $1`, id).Scan(&last)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: session %s", belay.ErrNotFound, id)
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return s.wrap(err)
		case uint64(last) > after:
			return nil
		}
		timer := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-w.ch:
			// The waiter was registered before the read, so a commit
			// between the read and this wait has left its signal here.
			timer.Stop()
		case <-timer.C:
		}
		if s.isClosed() {
			return belay.ErrStoreClosed
		}
	}
}

// addWaiter registers a waiter for session id, or for the change feed
// (id feedPayload), and starts the listener if it is not yet.
func (s *Store) addWaiter(id string) (*waiter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, belay.ErrStoreClosed
	}
	if !s.listenStarted {
		s.listenStarted = true
		ctx, cancel := context.WithCancel(context.Background())
		s.stopListen, s.listenDone = cancel, make(chan struct{})
		go s.listen(ctx)
	}
	w := &waiter{ch: make(chan struct{}, 1)}
	if id == feedPayload {
		s.feedWaiters[w] = struct{}{}
		return w, nil
	}
	set := s.waiters[id]
	if set == nil {
		set = map[*waiter]struct{}{}
		s.waiters[id] = set
	}
	set[w] = struct{}{}
	return w, nil
}

func (s *Store) dropWaiter(id string, w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == feedPayload {
		delete(s.feedWaiters, w)
		return
	}
	if set := s.waiters[id]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(s.waiters, id)
		}
	}
}

// wake signals the waiters of one session, or of all (id ""). A signal is
// kept until its waiter takes it (the channel holds one).
func (s *Store) wake(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		for _, set := range s.waiters {
			fire(set)
		}
		fire(s.feedWaiters)
		return
	}
	fire(s.waiters[id])
}

// wakeFeed signals the change feed's waiters.
func (s *Store) wakeFeed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	fire(s.feedWaiters)
}

// fire signals each waiter of set; a signal is kept until its waiter
// takes it. s.mu is held.
func fire(set map[*waiter]struct{}) {
	for w := range set {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// listen holds one connection in LISTEN and wakes the waiters of every
// session a commit names. While it is down, waiters poll; when it comes
// back, every waiter re-reads (notifications sent meanwhile are lost).
func (s *Store) listen(ctx context.Context) {
	defer close(s.listenDone)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		_ = err
		s.wake("")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A LISTEN connection is never handed back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		return err
	}
	s.mu.Lock()
	s.listening = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.listening = false
		s.mu.Unlock()
	}()
	s.wake("") // anything committed before LISTEN took effect
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == feedPayload {
			s.wakeFeed()
		} else {
			s.wake(n.Payload)
		}
	}
}

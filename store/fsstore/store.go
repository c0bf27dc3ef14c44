package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/journal/commitlog"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
)

var _ store.Store = (*Store)(nil)

// Names inside the data directory.
const (
	LockName     = "belay.lock"
	SessionsName = "sessions"
	LogName      = "commitlog"
)

// Sync modes.
const (
	SyncLog        = "log"
	SyncFile       = "file"
	SyncFilesystem = "filesystem"
)

// DefaultSnapshotEvery is how many state changes a session takes between
// snapshots.
const DefaultSnapshotEvery = 1000

// Options configure Open. The zero value is usable.
type Options struct {
	// FS is the filesystem; vfs.OS if nil.
	FS vfs.FS
	// Clock supplies time for events, leases and retention.
	Clock clock.Clock
	// LockTTL is the data dir lock's TTL; it is heartbeated at a third of it.
	LockTTL time.Duration
	// LockElapsed is the suspend-aware monotonic clock the lock's
	// self-fencing reads (lock.Options.Elapsed); tests inject it.
	LockElapsed func() time.Duration
	// Incarnation names this process in the lock record.
	Incarnation string
	// Purpose is written into the lock record ("daemon", "cli").
	Purpose string
	// SnapshotEvery is how many state changes a session takes between
	// snapshots (DefaultSnapshotEvery if 0).
	SnapshotEvery int
	// BufferedDelay bounds how long Buffered appends wait to be written.
	BufferedDelay time.Duration
	// ObserveSync, if set, is told how long each journal fdatasync took.
	ObserveSync func(time.Duration)
	// Sync is how commits are made durable: SyncLog (the default), one
	// store-wide commit log that every journal's commits go through, one
	// fdatasync of it per group of commits across sessions (the journals
	// are synced in the background and repaired from the log after a
	// power cut); SyncFile, one fdatasync per journal commit; or
	// SyncFilesystem, one syncfs(2) shared by every journal committing at
	// that moment, which waits for all the filesystem's dirty data, so it
	// suits a filesystem belay has mostly to itself.
	Sync string
	// LogSegmentSize is the commit log's segment size
	// (commitlog.DefaultSegmentSize if 0; tests lower it).
	LogSegmentSize int64
	// MaxOpen is how many idle session journals stay open
	// (DefaultMaxOpen if 0); journals in use are never closed.
	MaxOpen int
	// ReadOnly opens without the lock and without changing any file, for
	// offline inspection while a daemon may be running or down. Every
	// mutation fails with belay.ErrReadOnly.
	ReadOnly bool
	// OnLockLost is called if the data dir lock is lost (another process
	// judged this one dead). The store turns read-only first.
	OnLockLost func(error)
	// IndexEvery is how often the store index is written while the store
	// is open (DefaultIndexEvery if 0; negative: only by Close), so that a
	// restart after a kill opens only the journals used since.
	IndexEvery time.Duration
}

// Store is the embedded file store.
type Store struct {
	dir      string
	opts     Options
	fsys     vfs.FS
	clock    clock.Clock
	lock     *lock.Lock
	hb       *lock.Heartbeater
	lockLost atomic.Pointer[error]

	openMu sync.Mutex            // guards open
	open   map[*session]struct{} // sessions whose journal is open

	createMu sync.Mutex   // serializes CreateSession
	mu       sync.RWMutex // guards sessions and closed
	sessions map[string]*session
	closed   bool

	syncer      journal.Syncer
	closeSyncer func() error
	log         *commitlog.Log   // SyncLog
	replayed    commitlog.Replay // what opening the log found
	logPending  []string         // read-only: sessions whose journals lack what the log holds
	loadStats   IndexStats       // how Open loaded the sessions (index.go)
	ready       atomic.Bool      // Open finished
	idx         liveIndex        // the store index written while open (index.go)

	claims  claims         // admission, owners, rescue (claims.go)
	feed    feed           // the change feed (claims.go)
	closing chan struct{}  // closed by Close
	folds   sync.WaitGroup // folds of buffered state changes (session.committed)

	idxMu       sync.RWMutex      // innermost: guards the id indexes
	runs        map[string]string // run id -> session id
	deliveries  map[string]string // delivery id -> session id
	sessionKeys map[string]string // session idempotency key -> session id

	notify notifyIndex // open notifications per target (notify.go)
}

// Open opens (creating if needed) the store in dir and takes its lock. A
// second process gets an error wrapping belay.ErrStoreLocked that names
// the holder.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	if opts.SnapshotEvery <= 0 {
		opts.SnapshotEvery = DefaultSnapshotEvery
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = 15 * time.Second
	}
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = DefaultMaxOpen
	}
	s := &Store{
		dir: dir, opts: opts, fsys: opts.FS, clock: opts.Clock,
		sessions:    map[string]*session{},
		open:        map[*session]struct{}{},
		runs:        map[string]string{},
		deliveries:  map[string]string{},
		sessionKeys: map[string]string{},
		closing:     make(chan struct{}),
	}
	s.claims.init()
	s.feed.init()
	switch opts.Sync {
	case "", SyncLog:
		opts.Sync = SyncLog
		s.opts.Sync = SyncLog
	case SyncFile:
	case SyncFilesystem:
		if !opts.ReadOnly {
			if err := s.fsys.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("fsstore: create %s: %w", dir, err)
			}
			syncfs, closeFn, err := syncfsFunc(dir)
			if err != nil {
				return nil, err
			}
			s.syncer, s.closeSyncer = journal.NewGroupSyncer(syncfs), closeFn
		}
	default:
		return nil, fmt.Errorf("%w: sync mode %q is not %q, %q or %q", belay.ErrInvalid, opts.Sync, SyncLog, SyncFile, SyncFilesystem)
	}
	if !opts.ReadOnly {
		if err := s.fsys.MkdirAll(filepath.Join(dir, SessionsName), 0o700); err != nil {
			return nil, fmt.Errorf("fsstore: create %s: %w", dir, err)
		}
		s.lock = lock.New(filepath.Join(dir, LockName), lock.Options{
			TTL: opts.LockTTL, Incarnation: opts.Incarnation, Purpose: opts.Purpose, Elapsed: opts.LockElapsed,
		})
		if err := s.lock.TryAcquire(ctx); err != nil {
			if errors.Is(err, lock.ErrHeld) {
				return nil, fmt.Errorf("%w: %s: %v", belay.ErrStoreLocked, dir, err)
			}
			return nil, fmt.Errorf("fsstore: lock %s: %w", dir, err)
		}
		hb, err := s.lock.StartHeartbeat(context.WithoutCancel(ctx), lock.HeartbeatOptions{OnLost: s.onLockLost})
		if err != nil {
			_ = s.lock.Release()
			return nil, fmt.Errorf("fsstore: heartbeat %s: %w", dir, err)
		}
		s.hb = hb
	}
	if err := s.openLog(); err != nil {
		_ = s.Close()
		return nil, err
	}
	loaded, err := s.load()
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	// Scheduled in id order, newest first (queued runs of equal times
	// keep that order).
	slices.Reverse(loaded)
	s.schedule(loaded)
	s.ready.Store(true)
	s.scheduleIndex()
	return s, nil
}

// Replayed reports what opening the commit log found and did: how many
// session journals lacked what it held (after a power cut) and were
// repaired from it.
func (s *Store) Replayed() commitlog.Replay { return s.replayed }

// ApplyLog replays the commit log of the data directory dir into its
// session journals and retires its segments, as opening the store would:
// an offline writer of a journal (belay repair) calls it first, holding
// the directory's lock, so that a later replay cannot write the log's
// records over what it changed. A directory without segments is left as
// it is.
func ApplyLog(dir string) error {
	logDir := filepath.Join(dir, LogName)
	if segs, err := commitlog.Segments(nil, logDir); err != nil || len(segs) == 0 {
		return err
	}
	log, _, err := commitlog.Open(logDir, commitlog.Options{Path: func(id string) string {
		return filepath.Join(dir, SessionsName, id, journal.FileName)
	}})
	if err != nil {
		return fmt.Errorf("fsstore: %w", err)
	}
	return log.Close()
}

// logDir is where the commit log's segments are.
func (s *Store) logDir() string { return filepath.Join(s.dir, LogName) }

// journalPath is the journal file of a session: what the commit log's
// records under the session's id apply to.
func (s *Store) journalPath(id string) string {
	return filepath.Join(s.dir, SessionsName, id, journal.FileName)
}

// openLog replays the commit log into the journals before any is opened,
// and starts it (SyncLog). Opened read-only, the store changes nothing: it
// only finds the sessions whose journals lack what the log holds (a power
// cut the log was not yet replayed after) and reports them as a problem.
// Another mode finding segments left by SyncLog replays them and leaves no
// log running.
func (s *Store) openLog() error {
	if s.opts.Sync != SyncLog {
		if segs, err := commitlog.Segments(s.fsys, s.logDir()); err != nil || len(segs) == 0 {
			return err
		}
	}
	if s.opts.ReadOnly {
		pending, err := commitlog.Pending(s.fsys, s.logDir(), s.journalPath)
		if err != nil {
			return fmt.Errorf("fsstore: %w", err)
		}
		s.logPending = pending
		return nil
	}
	log, rep, err := commitlog.Open(s.logDir(), commitlog.Options{
		FS: s.fsys, Path: s.journalPath, SegmentSize: s.opts.LogSegmentSize,
		Fence: s.fence, ObserveSync: s.opts.ObserveSync,
	})
	if err != nil {
		return fmt.Errorf("fsstore: %w", err)
	}
	s.replayed = rep
	if s.opts.Sync != SyncLog {
		return log.Close()
	}
	s.log = log
	return nil
}

// onLockLost turns the store read-only for good, once, and tells the
// owner: the lock was lost, or this process could no longer prove it holds
// it (lock.ErrFenced).
func (s *Store) onLockLost(err error) {
	err = fmt.Errorf("%w: this process no longer provably owns %s and stopped writing: %w", belay.ErrReadOnly, s.dir, err)
	if !s.lockLost.CompareAndSwap(nil, &err) {
		return
	}
	if s.opts.OnLockLost != nil {
		s.opts.OnLockLost(err)
	}
}

// fence is the self-fencing check made before every durable write (see
// lock.Lock.Check): it fails once this process cannot prove that it still
// owns the data directory, and from then on for good.
func (s *Store) fence() error {
	if p := s.lockLost.Load(); p != nil {
		return *p
	}
	if s.lock == nil {
		return nil
	}
	if err := s.lock.Check(context.Background()); err != nil {
		s.onLockLost(err)
		return *s.lockLost.Load()
	}
	return nil
}

// Dir returns the data directory.
func (s *Store) Dir() string { return s.dir }

// load loads every session in the sessions directory, from the store
// index when its entry is trusted (index.go), else by opening its journal:
// on one goroutine per CPU and one more (opening a session is mostly
// system calls), then indexed in directory order.
func (s *Store) load() ([]*session, error) {
	root := filepath.Join(s.dir, SessionsName)
	defer func(t time.Time) { s.loadStats.Took = time.Since(t) }(time.Now())
	var idx map[string]indexEntry
	read := make(chan struct{})
	go func() {
		defer close(read)
		idx, s.loadStats.Err = s.readIndex()
	}()
	entries, err := s.fsys.ReadDir(root)
	<-read
	if errors.Is(err, fs.ErrNotExist) && s.opts.ReadOnly {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fsstore: read %s: %w", root, err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".new-") || strings.HasPrefix(name, ".trash-"):
			// An interrupted create (never acknowledged) or prune.
			if !s.opts.ReadOnly {
				if err := s.fsys.RemoveAll(filepath.Join(root, name)); err != nil {
					return nil, fmt.Errorf("fsstore: clean %s: %w", name, err)
				}
			}
			continue
		case ids.Check(ids.Session, name) != nil || !e.IsDir():
			continue // not ours
		}
		names = append(names, name)
	}
	loaded := make([]*session, len(names))
	var next, fromIndex atomic.Int64
	var wg sync.WaitGroup
	for range min(len(names), runtime.GOMAXPROCS(0)+1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				if e, ok := idx[names[i]]; ok {
					if ss := s.restore(names[i], e); ss != nil {
						loaded[i] = ss
						fromIndex.Add(1)
						continue
					}
				}
				ss, err := s.openSession(names[i])
				if err != nil {
					// One unreadable session must not keep the others from
					// loading: it is listed, read-only, with the error as its
					// problem.
					ss = &session{id: names[i], dir: filepath.Join(root, names[i]), store: s, st: newState()}
					ss.st.Session.ID = names[i]
					ss.setProblem(err)
				}
				loaded[i] = ss
			}
		}()
	}
	wg.Wait()
	s.loadStats.FromIndex = int(fromIndex.Load())
	s.loadStats.Opened = len(names) - s.loadStats.FromIndex
	for _, id := range s.logPending {
		for _, ss := range loaded {
			if ss.id == id {
				ss.setProblem(fmt.Errorf("%w: the journal of session %s lacks events the store's commit log holds (the machine stopped before they reached it); opening the store for writing puts them back: belay daemon start", belay.ErrReadOnly, id))
			}
		}
	}
	if err := s.index(loaded...); err != nil {
		for _, ss := range loaded {
			_ = ss.close()
		}
		return nil, err
	}
	return loaded, nil
}

// index adds loaded sessions to the id indexes, then to the store: their
// state is read before any write can reach them.
func (s *Store) index(sessions ...*session) error {
	s.idxMu.Lock()
	for _, ss := range sessions {
		s.indexLocked(ss)
	}
	s.idxMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return belay.ErrStoreClosed
	}
	for _, ss := range sessions {
		s.sessions[ss.id] = ss
	}
	return nil
}

// indexLocked adds a session's runs, deliveries and key to the id
// indexes. s.idxMu is held.
func (s *Store) indexLocked(ss *session) {
	for _, r := range ss.st.Runs {
		s.runs[r.ID] = ss.id
	}
	for i := range ss.st.done.len() {
		s.runs[ss.st.done.id(i)] = ss.id
	}
	for _, d := range ss.st.Deliveries {
		s.deliveries[d.ID] = ss.id
	}
	if ss.st.SessionKey != "" {
		s.sessionKeys[ss.st.SessionKey] = ss.id
	}
}

// Close snapshots every session, closes the journals, writes the store
// index (when every journal closed cleanly) and releases the lock.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	sessions := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	s.stopIndex()
	var errs []error
	for _, ss := range sessions {
		errs = append(errs, ss.close())
	}
	s.folds.Wait()
	if s.log != nil {
		// After the journals: it checkpoints what they committed.
		errs = append(errs, s.log.Close())
	}
	s.waitInvalidations()
	if !s.opts.ReadOnly && s.ready.Load() && errors.Join(errs...) == nil && s.fence() == nil {
		// After the log: the journals it names are synced and it has no
		// segment left to replay over them. (Not after a failed Open: it
		// would replace an index with one of no sessions.)
		errs = append(errs, s.writeIndex(sessions))
	}
	if s.hb != nil {
		errs = append(errs, s.hb.Stop(context.Background()))
	}
	if s.lock != nil && s.lockLost.Load() == nil {
		errs = append(errs, s.lock.Release())
	}
	if s.closeSyncer != nil {
		errs = append(errs, s.closeSyncer())
	}
	return errors.Join(errs...)
}

// writable fails if the store cannot change state.
func (s *Store) writable() error {
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: store %s was opened read-only", belay.ErrReadOnly, s.dir)
	}
	return s.fence()
}

// session returns a loaded session.
func (s *Store) session(id string) (*session, error) {
	if err := ids.Check(ids.Session, id); err != nil {
		return nil, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, belay.ErrStoreClosed
	}
	ss, ok := s.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: session %s", belay.ErrNotFound, id)
	}
	return ss, nil
}

func (s *Store) allSessions() ([]*session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, belay.ErrStoreClosed
	}
	out := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		out = append(out, ss)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id > out[j].id })
	return out, nil
}

// CreateSession creates a session in a temporary directory, journals
// session.created, and renames it into place.
func (s *Store) CreateSession(ctx context.Context, in belay.SessionInput) (belay.Session, error) {
	if err := s.writable(); err != nil {
		return belay.Session{}, err
	}
	if in.Provider == "" {
		return belay.Session{}, fmt.Errorf("%w: a session needs a provider", belay.ErrInvalid)
	}
	if err := checkJSON("session options", in.Options); err != nil {
		return belay.Session{}, err
	}
	if in.FirstRun != nil {
		if err := checkJSON("run input", in.FirstRun.Input); err != nil {
			return belay.Session{}, err
		}
		if err := belay.CheckTags(in.FirstRun.Tags, in.FirstRun.Meta); err != nil {
			return belay.Session{}, err
		}
		if err := belay.CheckPriority(in.FirstRun.Priority); err != nil {
			return belay.Session{}, err
		}
	}
	id := in.ID
	if id == "" {
		id = ids.New(ids.Session)
	} else if err := ids.Check(ids.Session, id); err != nil {
		return belay.Session{}, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	// Creates are serialized so that ids and keys are checked and claimed
	// together; lookups are not blocked by a create's file system work.
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if in.IdempotencyKey != "" {
		if sess, ok, err := s.sessionByKey(ctx, in.IdempotencyKey); ok || err != nil {
			return sess, err
		}
	}
	s.mu.RLock()
	_, exists := s.sessions[id]
	closed := s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return belay.Session{}, belay.ErrStoreClosed
	case exists:
		return belay.Session{}, fmt.Errorf("%w: session %s", belay.ErrExists, id)
	}
	ss, err := s.createSessionDir(ctx, id, in)
	if err != nil {
		return belay.Session{}, s.classify(err)
	}
	if err := s.index(ss); err != nil {
		_ = ss.close()
		return belay.Session{}, err
	}
	s.created(ss)
	return ss.snapshotSession(), nil
}

func (s *Store) sessionByKey(ctx context.Context, key string) (belay.Session, bool, error) {
	s.idxMu.RLock()
	id, ok := s.sessionKeys[key]
	s.idxMu.RUnlock()
	if !ok {
		return belay.Session{}, false, nil
	}
	sess, err := s.Session(ctx, id)
	return sess, err == nil, err
}

func (s *Store) createSessionDir(ctx context.Context, id string, in belay.SessionInput) (*session, error) {
	root := filepath.Join(s.dir, SessionsName)
	tmp := filepath.Join(root, ".new-"+id)
	final := filepath.Join(root, id)
	if err := s.fsys.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("fsstore: create session dir: %w", err)
	}
	fail := func(err error) (*session, error) {
		_ = s.fsys.RemoveAll(tmp)
		return nil, err
	}
	// The new journal syncs its own file: its one commit is not worth a
	// log record under a name that is not yet in place.
	jo := s.journalOptions(false)
	jo.Log, jo.LogName = nil, ""
	j, err := journal.Open(tmp, jo)
	if err != nil {
		return fail(err)
	}
	data, err := marshal(belay.SessionCreatedData{
		ID: id, Provider: in.Provider, Model: in.Model, Labels: in.Labels, Options: in.Options, Key: in.IdempotencyKey,
	})
	evs := []belay.Event{{Type: belay.EventSessionCreated, ID: storeIDPrefix + "session/" + id, Data: data}}
	if err == nil && in.FirstRun != nil {
		// The session and its first run are one durable write: a failed
		// create leaves neither.
		var e belay.Event
		if e, _, _, err = runCreatedEvent(*in.FirstRun, in.Provider, in.Model, false); err == nil {
			evs = append(evs, e)
		}
	}
	if err == nil {
		now := s.clock.Now().UTC()
		for i := range evs {
			evs[i].TS = now
		}
		_, err = j.AppendUnique(ctx, journal.Sync, evs...)
	}
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(fmt.Errorf("fsstore: create session %s: %w", id, err))
	}
	if err := s.fence(); err != nil {
		return fail(err)
	}
	if err := s.fsys.Rename(tmp, final); err != nil {
		return fail(fmt.Errorf("fsstore: create session %s: %w", id, err))
	}
	if err := s.fsys.SyncDir(root); err != nil {
		return nil, fmt.Errorf("fsstore: create session %s: sync %s: %w", id, root, err)
	}
	return s.openSession(id)
}

func (s *Store) journalOptions(readOnly bool) journal.Options {
	o := journal.Options{FS: s.fsys, Now: s.clock.Now, BufferedDelay: s.opts.BufferedDelay, ReadOnly: readOnly, ObserveSync: s.opts.ObserveSync, Syncer: s.syncer}
	if s.log != nil && !readOnly {
		o.Log = s.log
	}
	if !readOnly && s.lock != nil {
		o.Fence = s.fence
	}
	return o
}

// Session returns one session.
func (s *Store) Session(_ context.Context, id string) (belay.Session, error) {
	ss, err := s.session(id)
	if err != nil {
		return belay.Session{}, err
	}
	return ss.snapshotSession(), nil
}

// Sessions lists sessions, newest first.
func (s *Store) Sessions(_ context.Context, f belay.SessionFilter) ([]belay.Session, error) {
	all, err := s.allSessions()
	if err != nil {
		return nil, err
	}
	var out []belay.Session
	for _, ss := range all {
		if f.Before != "" && ss.id >= f.Before {
			continue
		}
		sess := ss.snapshotSession()
		if f.State != "" && sess.State != f.State || f.Provider != "" && sess.Provider != f.Provider {
			continue
		}
		out = append(out, sess)
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out, nil
}

// Append journals events in a session.
func (s *Store) Append(ctx context.Context, id string, d belay.Durability, evs ...belay.Event) ([]uint64, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	ss, err := s.session(id)
	if err != nil {
		return nil, err
	}
	if err := checkCallerIDs(evs); err != nil {
		return nil, err
	}
	fenced := false
	for i := range evs {
		if belay.StoreEventType(evs[i].Type) {
			return nil, fmt.Errorf("%w: event type %q is written by the store only", belay.ErrInvalid, evs[i].Type)
		}
		if evs[i].Epoch != 0 || evs[i].Run != "" {
			fenced = true
		}
	}
	if !fenced {
		return ss.appendRaw(ctx, d, evs)
	}
	// Fenced writes check the epoch and append under the session lock so
	// that no lease grant can slip between the check and the write.
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := range evs {
		if err := ss.checkFence(&evs[i]); err != nil {
			return nil, err
		}
	}
	return ss.appendRaw(ctx, d, evs)
}

// Events returns events after seq after.
func (s *Store) Events(_ context.Context, id string, after uint64, limit int) ([]belay.Event, error) {
	ss, err := s.session(id)
	if err != nil {
		return nil, err
	}
	j, err := ss.acquire()
	if err != nil {
		return nil, ss.wrap(err)
	}
	defer ss.release(j)
	// A quarantined session returns what precedes the damage together with
	// the error: it is never read as if it simply ended.
	evs, err := j.Read(after, limit)
	return evs, ss.wrap(err)
}

// ScanEvents streams a session's events after seq after (see store.Store).
func (s *Store) ScanEvents(ctx context.Context, id string, after uint64, fn func(belay.Event) error) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	ss, err := s.session(id)
	if err != nil {
		return err
	}
	j, err := ss.acquire()
	if err != nil {
		return ss.wrap(err)
	}
	defer ss.release(j)
	var ferr error
	n := 0
	err = j.Scan(after, func(e belay.Event) bool {
		if n++; n%64 == 0 && ctx.Err() != nil {
			ferr = context.Cause(ctx)
			return false
		}
		ferr = fn(e)
		return ferr == nil
	})
	if ferr != nil {
		return ferr
	}
	if err == nil {
		err = ctx.Err()
	}
	return ss.wrap(err)
}

// WaitEvents blocks until the session has an event after seq after. A
// journal whose last write failed (a full disk) is not the end of the
// session: it is reopened by the next use once writes succeed again, so
// the wait goes on (and takes part in that healing) rather than failing.
func (s *Store) WaitEvents(ctx context.Context, id string, after uint64) error {
	ss, err := s.session(id)
	if err != nil {
		return err
	}
	backoff := 50 * time.Millisecond
	for {
		j, err := ss.acquire()
		if err != nil && !transient(err) {
			return ss.wrap(err)
		}
		if err == nil {
			err = j.Wait(ctx, after)
			ss.release(j)
			if err == nil || j.Failed() == nil || ctx.Err() != nil {
				return ss.wrap(err)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// classify maps a write error onto belay's sentinels: a full disk becomes
// a *belay.DiskFullError naming the free space, the rest as wrapJournal.
func (s *Store) classify(err error) error {
	if err == nil || !vfs.IsNoSpace(err) {
		return wrapJournal(err)
	}
	var df *belay.DiskFullError
	if errors.As(err, &df) {
		return err
	}
	free := int64(-1)
	if n, ferr := vfs.FreeBytes(s.dir); ferr == nil {
		free = int64(n)
	}
	return &belay.DiskFullError{Path: s.dir, Free: free, Err: err}
}

// wrapJournal maps journal errors onto belay's sentinels.
func wrapJournal(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, journal.ErrClosed):
		return fmt.Errorf("%w: %v", belay.ErrStoreClosed, err)
	case errors.Is(err, journal.ErrReadOnly):
		return fmt.Errorf("%w: %w", belay.ErrReadOnly, err)
	case errors.Is(err, journal.ErrInvalidEvent), errors.Is(err, journal.ErrTooLarge):
		return fmt.Errorf("%w: %w", belay.ErrInvalid, err)
	}
	return err
}

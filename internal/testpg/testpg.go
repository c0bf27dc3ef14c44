// Package testpg starts throwaway PostgreSQL clusters for tests and
// benchmarks: initdb and pg_ctl in a temporary directory, listening on a
// free loopback port and on a unix socket in that directory, stopped and
// removed when the test ends (also when it fails).
//
// PostgreSQL refuses to run as root. When the process is root (as on CI
// and the development machines), the cluster's directory is handed to the
// unprivileged "postgres" account (or "nobody") and initdb, pg_ctl and the
// server run as that account.
package testpg

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDirs are searched, in order, for initdb and pg_ctl after $PGBIN and
// $PATH.
var BinDirs = []string{
	"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin",
	"/usr/lib/postgresql/14/bin", "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin",
}

// ErrNoBinaries says initdb or pg_ctl cannot be found.
var ErrNoBinaries = errors.New("testpg: PostgreSQL server binaries (initdb, pg_ctl) not found; install the postgresql package or set PGBIN")

// Options configure a cluster. The zero value is a small cluster for tests.
type Options struct {
	// SharedBuffers is postgres' shared_buffers ("16MB" if empty).
	SharedBuffers string
	// MaxConnections is max_connections (100 if 0).
	MaxConnections int
	// Fsync keeps fsync on (benchmarks: durable like production). Tests
	// run without it; commits still reach the kernel before they return,
	// so a server crash (Restart) loses nothing, only a machine crash would.
	Fsync bool
	// Settings are more postgresql.conf lines ("name = value").
	Settings []string
}

// Cluster is a running throwaway PostgreSQL.
type Cluster struct {
	Dir  string // the cluster's root: data/, the socket and the log
	Port int
	bin  string
	cred *syscall.Credential

	// reaper stops the server and removes Dir if this process dies
	// without calling Stop (a panic, a test timeout, SIGKILL).
	reaper *exec.Cmd

	mu      sync.Mutex
	stopped bool
}

// Find returns the directory holding initdb and pg_ctl.
func Find() (string, error) {
	var dirs []string
	if d := os.Getenv("PGBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	dirs = append(dirs, BinDirs...)
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start starts a cluster for tb and stops and removes it when tb ends. It
// skips tb, loudly, only when the server binaries cannot be found.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if _, err := Find(); err != nil {
		tb.Skipf("SKIPPING: %v (on Debian/Ubuntu: apt-get install postgresql)", err)
	}
	c, err := New(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// New starts a cluster outside of a test (benchmark programs); the caller
// must Stop it.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "belay-pg-")
	if err != nil {
		return nil, fmt.Errorf("testpg: %w", err)
	}
	c := &Cluster{Dir: dir, bin: bin, cred: cred}
	if err := c.init(ctx, opts); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// credential is who runs the server: nil (this process) unless root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("testpg: running as root and neither a postgres nor a nobody account exists to run PostgreSQL as (it refuses root)")
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) init(ctx context.Context, opts Options) error {
	if c.cred != nil {
		// The server's account must reach and own its directory.
		if err := os.Chmod(c.Dir, 0o700); err != nil {
			return err
		}
		if err := os.Chown(c.Dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("testpg: hand %s to the server account: %w", c.Dir, err)
		}
	}
	if out, err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return fmt.Errorf("testpg: initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	c.Port = port
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", port),
		fmt.Sprintf("unix_socket_directories = '%s'", c.Dir),
		"shared_buffers = " + or(opts.SharedBuffers, "16MB"),
		fmt.Sprintf("max_connections = %d", orInt(opts.MaxConnections, 100)),
		"dynamic_shared_memory_type = posix",
		"logging_collector = off",
		"log_min_messages = warning",
		"max_wal_size = 1GB",
	}
	if !opts.Fsync {
		conf = append(conf, "fsync = off", "full_page_writes = off")
	}
	conf = append(conf, opts.Settings...)
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("testpg: %w", err)
	}
	_, err = f.WriteString("\n# testpg\n" + strings.Join(conf, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("testpg: write postgresql.conf: %w", err)
	}
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.Dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "log"))
		return fmt.Errorf("testpg: pg_ctl start: %w: %s\n%s", err, out, log)
	}
	return c.startReaper()
}

// startReaper starts a small shell, as the server's account, that waits
// for this process to end and then stops the server and removes its
// directory. Stop kills it first.
func (c *Cluster) startReaper() error {
	script := `while [ -d /proc/$0 ]; do sleep 1; done; "$1/pg_ctl" -D "$2/data" -m immediate -w stop >/dev/null 2>&1; rm -rf "$2"`
	cmd := exec.Command("/bin/sh", "-c", script, strconv.Itoa(os.Getpid()), c.bin, c.Dir)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: c.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testpg: start the reaper: %w", err)
	}
	c.reaper = cmd
	return nil
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Stop stops the server at once and removes its directory. It is safe to
// call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	if c.reaper != nil {
		_ = c.reaper.Process.Kill()
		_ = c.reaper.Wait()
	}
	var errs []error
	if _, err := os.Stat(filepath.Join(c.data(), "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop")
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("testpg: pg_ctl stop: %w: %s", err, out))
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("testpg: remove %s: %w", c.Dir, err))
	}
	return errors.Join(errs...)
}

// Restart stops the server at once (as a crash would) and starts it again
// on the same port and data.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Down(ctx); err != nil {
		return err
	}
	return c.Up(ctx)
}

// Down stops the server at once (as a crash would), keeping its data:
// the database is unreachable until Up.
func (c *Cluster) Down(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("testpg: pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// Up starts the server that Down stopped, on the same port and data.
func (c *Cluster) Up(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.Dir, "log"), "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("testpg: pg_ctl start: %w: %s", err, out)
	}
	return nil
}

// URL is the connection URL of database db over TCP.
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)), Path: "/" + db}
	u.RawQuery = "sslmode=disable"
	return u.String()
}

// SocketURL is the connection URL of database db over the unix socket.
func (c *Cluster) SocketURL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", db, url.QueryEscape(c.Dir), c.Port)
}

// CreateDatabase creates a fresh database and returns its name.
func (c *Cluster) CreateDatabase(ctx context.Context) (string, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("testpg: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("testpg: create database: %w", err)
	}
	return name, nil
}

// Database creates a fresh database for tb and returns its URL. The
// database goes with the cluster.
func (c *Cluster) Database(tb testing.TB) string {
	tb.Helper()
	name, err := c.CreateDatabase(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return c.URL(name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testpg: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// CPU returns the CPU time (user and system) the cluster's server has used
// since it started: the postmaster, its live children (backends, the
// checkpointer, autovacuum workers...) and the children that have exited.
// It reads /proc, so it works on Linux only; elsewhere it returns an error.
// Benchmarks take it before and after a phase to tell the database's share
// of the CPU from their own.
func (c *Cluster) CPU() (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("testpg: cpu: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("testpg: cpu: postmaster.pid: %w", err)
	}
	// A child reaped between reading the postmaster and scanning /proc
	// would be in neither: read the postmaster again after the scan and
	// take the sample only when no child was reaped meanwhile.
	for {
		self, err := procStat(pid)
		if err != nil {
			return 0, fmt.Errorf("testpg: cpu: the postmaster: %w", err)
		}
		// The exited children's time is in the postmaster's
		// cutime/cstime once it has waited for them.
		ticks := self.utime + self.stime + self.cutime + self.cstime
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return 0, fmt.Errorf("testpg: cpu: %w", err)
		}
		for _, e := range entries {
			child, err := strconv.Atoi(e.Name())
			if err != nil || child == pid {
				continue
			}
			st, err := procStat(child)
			if err != nil || st.ppid != int64(pid) {
				continue // gone meanwhile, or not the server's
			}
			ticks += st.utime + st.stime
		}
		again, err := procStat(pid)
		if err != nil {
			return 0, fmt.Errorf("testpg: cpu: the postmaster: %w", err)
		}
		if again.cutime == self.cutime && again.cstime == self.cstime {
			return time.Duration(ticks) * time.Second / clockTicks, nil
		}
	}
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

type stat struct{ ppid, utime, stime, cutime, cstime int64 }

// procStat reads the fields of /proc/PID/stat that CPU needs.
func procStat(pid int) (stat, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, err
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state, ppid, ... utime (14th field), stime, cutime,
	// cstime.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return stat{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 15 {
		return stat{}, errors.New("short /proc stat")
	}
	var n [5]int64
	for k, idx := range [5]int{1, 11, 12, 13, 14} {
		if n[k], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return stat{}, fmt.Errorf("malformed /proc stat: %w", err)
		}
	}
	return stat{ppid: n[0], utime: n[1], stime: n[2], cutime: n[3], cstime: n[4]}, nil
}

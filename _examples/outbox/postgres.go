package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the database/sql driver "postgres"
)

// postgres.go gives the example and its test a PostgreSQL: the one at POSTGRES_URL, or a
// throw-away server started from a local PostgreSQL installation (Debian's postgresql package
// puts initdb and postgres in /usr/lib/postgresql/<version>/bin, off the PATH).

// postgresURLEnv names the PostgreSQL to use instead of a throw-away one, as a lib/pq URL such
// as postgres://user:password@127.0.0.1:5432/db?sslmode=disable.
const postgresURLEnv = "POSTGRES_URL"

// errNoPostgres means there is no local PostgreSQL installation to start a throw-away server
// from.
var errNoPostgres = errors.New("no PostgreSQL installation: initdb is neither on the PATH nor in /usr/lib/postgresql/<version>/bin")

// tempPostgres is a throw-away PostgreSQL server on a loopback port, its data in a temporary
// directory.
type tempPostgres struct {
	URL string
	dir string
	cmd *exec.Cmd
}

// openPostgres returns the URL of the PostgreSQL at POSTGRES_URL, or else starts a throw-away
// one (stop it with its stop function), or returns an error wrapping errNoPostgres.
func openPostgres(logf func(format string, args ...any)) (url string, stop func(), err error) {
	if url := os.Getenv(postgresURLEnv); url != "" {
		logf("using PostgreSQL at %s (%s)", redactURL(url), postgresURLEnv)
		return url, func() {}, nil
	}
	pg, err := startTempPostgres()
	if errors.Is(err, errNoPostgres) {
		return "", nil, fmt.Errorf("%w; set %s=postgres://user:password@host:5432/db?sslmode=disable, or install PostgreSQL (apt-get install postgresql) so that a throw-away server can be started",
			err, postgresURLEnv)
	}
	if err != nil {
		return "", nil, err
	}
	logf("using a throw-away PostgreSQL at %s (set %s to use another)", pg.URL, postgresURLEnv)
	return pg.URL, pg.Stop, nil
}

// postgresBinDir returns the directory that holds initdb and postgres: the one of initdb on
// the PATH, else the newest /usr/lib/postgresql/<version>/bin.
func postgresBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errNoPostgres
}

// versionOf reads the major version from /usr/lib/postgresql/<version>/bin.
func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// startTempPostgres runs initdb in a new temporary directory and starts postgres on a free
// loopback port, without a Unix socket, with fsync off (the data is thrown away). initdb and
// postgres refuse to run as root, so as root both run as the "postgres" user (which the
// postgresql package creates), and the directory is handed to that user.
func startTempPostgres() (*tempPostgres, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL needs a user to run as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "redisdelay-outbox-pg-")
	if err != nil {
		return nil, err
	}
	pg := &tempPostgres{dir: dir}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			pg.Stop()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		pg.Stop()
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pg.Stop()
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		pg.Stop()
		return nil, err
	}
	defer logFile.Close()
	pg.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off")
	pg.cmd.Stdout, pg.cmd.Stderr = logFile, logFile
	pg.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := pg.cmd.Start(); err != nil {
		pg.Stop()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	pg.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := pg.waitReady(15 * time.Second); err != nil {
		log, _ := os.ReadFile(logFile.Name())
		pg.Stop()
		return nil, fmt.Errorf("postgres on port %d: %w\n%s", port, err, log)
	}
	return pg, nil
}

// waitReady waits until the server accepts a connection and a query.
func (pg *tempPostgres) waitReady(timeout time.Duration) error {
	db, err := sql.Open("postgres", pg.URL)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server (SIGQUIT, PostgreSQL's immediate shutdown) and removes its files. It
// is idempotent.
func (pg *tempPostgres) Stop() {
	if pg.cmd != nil && pg.cmd.Process != nil {
		_ = pg.cmd.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { _ = pg.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = pg.cmd.Process.Kill()
			<-done
		}
		pg.cmd = nil
	}
	if pg.dir != "" {
		_ = os.RemoveAll(pg.dir)
		pg.dir = ""
	}
}

// redactURL hides the password of a PostgreSQL URL for the log.
func redactURL(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if name, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		return scheme + "://" + name + ":xxxxx@" + host
	}
	return url
}

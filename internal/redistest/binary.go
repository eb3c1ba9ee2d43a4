package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Environment variables that choose the programs the harness runs.
const (
	// ServerEnv names the server program: a name looked up on PATH or a
	// path, for example /usr/bin/valkey-server. Unset or empty:
	// redis-server from PATH. Sentinels are the same program with
	// --sentinel.
	ServerEnv = "DLOCK_REDIS_SERVER"
	// CLIEnv names the command-line client that creates clusters
	// (--cluster create). Unset or empty: the "-cli" program beside a
	// ServerEnv program named "*-server" (valkey-cli beside
	// valkey-server) if there is one, else redis-cli from PATH.
	CLIEnv = "DLOCK_REDIS_CLI"
)

// ErrNotServer means the program ServerEnv names runs, but is not a server:
// `--version` does not say "server". Debian's valkey-server and
// redis-server are links to valkey-check-rdb and redis-check-rdb, which
// pick their mode from the name they are started under: name the link,
// not the file it points to.
var ErrNotServer = errors.New("redistest: not a Redis or Valkey server program")

// ServerBinary returns the server program the harness starts: the value of
// ServerEnv, or "redis-server". It is passed to exec as given (never with
// its links resolved), so the program sees that name as argv[0].
func ServerBinary() string {
	if v := os.Getenv(ServerEnv); v != "" {
		return v
	}
	return "redis-server"
}

// CLIBinary returns the command-line client the harness runs to create a
// cluster (see CLIEnv).
func CLIBinary() string {
	if v := os.Getenv(CLIEnv); v != "" {
		return v
	}
	if srv := os.Getenv(ServerEnv); srv != "" {
		if base, ok := strings.CutSuffix(filepath.Base(srv), "-server"); ok {
			cli := base + "-cli"
			if strings.ContainsRune(srv, filepath.Separator) {
				cli = filepath.Join(filepath.Dir(srv), cli)
			}
			if _, err := exec.LookPath(cli); err == nil {
				return cli
			}
		}
	}
	return "redis-cli"
}

// installHint is the format (two %v: the program, the lookup error) of the
// failure reported when the server program cannot be found.
const installHint = "redistest: %s not found (%v); " +
	"these tests need a real Redis server: install it, e.g. `apt-get install -y redis-server` " +
	"(Debian/Ubuntu) or `brew install redis` (macOS), or name a Valkey server in " + ServerEnv +
	" (e.g. " + ServerEnv + "=/usr/bin/valkey-server)"

// versionChecked caches the verdict of the `--version` check per program
// path (the lookup itself runs every time: the environment may change
// between tests, as in TestMissingBinaryFails).
var versionChecked struct {
	sync.Mutex
	m map[string]error
}

// checkBinaries reports whether the server program (and, with cli, the
// client) can be run: found on PATH (or at its path), and a server by its
// own `--version`.
func checkBinaries(cli bool) error {
	srv := ServerBinary()
	path, err := exec.LookPath(srv)
	if err != nil {
		return fmt.Errorf(installHint, srv, err)
	}
	if cli {
		if c := CLIBinary(); c != "" {
			if _, err := exec.LookPath(c); err != nil {
				return fmt.Errorf(installHint, c, err)
			}
		}
	}
	versionChecked.Lock()
	defer versionChecked.Unlock()
	if err, ok := versionChecked.m[path]; ok {
		return err
	}
	err = checkVersion(srv)
	if versionChecked.m == nil {
		versionChecked.m = make(map[string]error)
	}
	versionChecked.m[path] = err
	return err
}

// checkVersion runs `srv --version` and checks that it is a server.
func checkVersion(srv string) error {
	out, err := exec.Command(srv, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: %s --version: %w: %s", srv, err, strings.TrimSpace(string(out)))
	}
	// "Redis server v=7.0.15 ..." or "Valkey server v=8.0.1 ...";
	// valkey-check-rdb says "valkey-check-rdb v=8.0.1 ...".
	if !strings.Contains(string(out), " server v=") {
		return fmt.Errorf("%w: %s --version says %q (%s names the server program, e.g. valkey-server, not the file it links to)",
			ErrNotServer, srv, strings.TrimSpace(string(out)), ServerEnv)
	}
	return nil
}

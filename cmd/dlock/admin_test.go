package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/redistest"
)

// `dlock release --token "$DLOCK_TOKEN"` works from inside `run -s` and
// `run --limit`; an owner id releases nothing; `release --force` frees a
// semaphore.
func TestReleaseEveryKind(t *testing.T) {
	t.Parallel()
	for _, mode := range [][]string{{"-s"}, {"--limit", "2"}} {
		key := testKey(t)
		// run may see its lock gone before the command exits, and stop
		// the command's tree: the command ignores SIGTERM to report.
		script := fmt.Sprintf(`trap '' TERM; %s --redis %s release %s --token "$DLOCK_TOKEN"; echo "rc=$?"`, binPath, srv.URL(), key)
		args := append(append([]string{"run"}, mode...), key, "--", "sh", "-c", script)
		r := dlockRun(t, nil, onSrv(args...)...)
		if !strings.Contains(r.stdout, "rc=0") || !strings.Contains(r.stdout, "released") {
			t.Errorf("release --token $DLOCK_TOKEN inside run %v:\n%v", mode, r)
		}
	}

	c, _ := lib(t)
	ctx := context.Background()
	// A reentrant hold: its owner id is no token.
	key := testKey(t)
	lk, err := c.Reentrant(key).TryLock(ctx, "job-42", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	expectCode(t, dlockRun(t, nil, onSrv("release", key, "--token", "job-42")...), 1)
	if err := lk.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("the hold after release --token OWNER: %v", err)
	}
	expectCode(t, dlockRun(t, nil, onSrv("release", key, "--token", lk.Token())...), 0)

	// A semaphore: --force frees every holder.
	sem := testKey(t)
	for range 2 {
		if _, err := c.Semaphore(sem, 2).TryAcquire(ctx, 1, dlock.WithTTL(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	r := dlockRun(t, nil, onSrv("release", sem, "--force")...)
	expectCode(t, r, 0)
	expectCode(t, dlockRun(t, nil, onSrv("status", sem)...), 3)
}

// status and list show short tokens unless --show-token; every kind is
// shown with its handles and auxiliary keys; an auxiliary key is no lock.
func TestStatusTokensAndAux(t *testing.T) {
	t.Parallel()
	c, rdb := lib(t)
	ctx := context.Background()
	key := testKey(t)
	lk := hold(t, key)
	r := dlockRun(t, nil, onSrv("status", key)...)
	expectCode(t, r, 0)
	if strings.Contains(r.stdout, lk.Token()) || !strings.Contains(r.stdout, lk.Token()[:6]+"…") {
		t.Errorf("status prints the whole token (or no short form):\n%v", r)
	}
	r = dlockRun(t, nil, onSrv("status", key, "--json")...)
	if strings.Contains(r.stdout, lk.Token()) {
		t.Errorf("status --json prints the whole token:\n%v", r)
	}
	r = dlockRun(t, nil, onSrv("list", "--json", key)...)
	if strings.Contains(r.stdout, lk.Token()) || !strings.Contains(r.stdout, key) {
		t.Errorf("list --json prints the whole token:\n%v", r)
	}
	r = dlockRun(t, nil, onSrv("status", key, "--json", "--show-token")...)
	var v lockView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Value != lk.Token() {
		t.Errorf("status --show-token: value %q (%v); want %q\n%v", v.Value, err, lk.Token(), r)
	}

	// A semaphore with a limit: listed once, as a semaphore, with its limit
	// key among its aux keys; the limit key is not a lock.
	sem := testKey(t)
	if err := c.Semaphore(sem, 1).SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	slk, err := c.Semaphore(sem, 5).TryAcquire(ctx, 1, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer slk.Unlock(ctx)
	limitKey := strings.TrimSuffix(adminOn(t, rdb).KeysFor(sem).Fence, ":fence") + ":limit"
	r = dlockRun(t, nil, onSrv("list", "--json", "*"+sem+"*")...)
	expectCode(t, r, 0)
	var views []lockView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
		t.Fatalf("list --json: %v\n%v", err, r)
	}
	if len(views) != 1 || views[0].Key != sem || views[0].Kind != "semaphore" || !contains(views[0].Aux, limitKey) {
		t.Errorf("list of a semaphore with a limit: %+v; want one semaphore row with %s among its aux keys", views, limitKey)
	}
	if len(views) == 1 && (len(views[0].Tokens) != 1 || views[0].Tokens[0] != slk.Token()[:6]+"…") {
		t.Errorf("semaphore tokens %q; want the short form of %q", views[0].Tokens, slk.Token())
	}
	r = dlockRun(t, nil, onSrv("release", limitKey, "--force")...)
	expectCode(t, r, 4)
	expectStderr(t, r, "limit key of lock", sem)
	if n, _ := srv.Client(t).Exists(ctx, limitKey).Result(); n != 1 {
		t.Errorf("release --force deleted the limit key")
	}
	expectCode(t, dlockRun(t, nil, onSrv("status", limitKey)...), 4)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Keys and values with control characters are printed quoted: no escape
// sequence reaches the terminal and no newline forges a row.
func TestStatusQuotesNonPrintable(t *testing.T) {
	t.Parallel()
	_, rdb := lib(t)
	ctx := context.Background()
	key := testKey(t) + "\x1b[31mred\nforged\trow"
	rdb.Set(ctx, key, "v\x1b]0;title\x07\nforged 1 - 0", time.Minute)
	for _, args := range [][]string{{"status", key, "--show-token"}, {"list", testKey(t)[:5] + "*", "--show-token"}} {
		r := dlockRun(t, nil, onSrv(args...)...)
		if strings.ContainsAny(r.stdout, "\x1b\x07") {
			t.Errorf("%s prints control characters raw:\n%q", args[0], r.stdout)
		}
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "forged") {
				t.Errorf("%s: a row was forged by a newline:\n%s", args[0], r.stdout)
			}
		}
		if !strings.Contains(r.stdout, strconv.Quote(key)) {
			t.Errorf("%s: key not shown quoted:\n%s", args[0], r.stdout)
		}
	}
}

// Bad input exits 2 with one "dlock:" prefix and the real limit.
func TestBadInputExit2(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 70_000)
	for _, args := range [][]string{{"status", long}, {"release", long, "--force"}, {"release", long, "--token", "x"}} {
		r := dlockRun(t, nil, onSrv(args...)...)
		expectCode(t, r, 2)
		expectStderr(t, r, "70000 bytes", strconv.Itoa(keyrules.MaxKeyLength))
		if strings.Count(r.stderr, "dlock:") != 1 {
			t.Errorf("%s: want one dlock: prefix:\n%v", args[0], r)
		}
	}
	r := dlockRun(t, nil, onSrv("run", "--ttl", "1ms", testKey(t), "--", "true")...)
	expectCode(t, r, 2)
	expectStderr(t, r, "1ms is outside 3.046ms")
	if strings.Count(r.stderr, "dlock:") != 1 {
		t.Errorf("--ttl 1ms: want one dlock: prefix:\n%v", r)
	}
	r = dlockRun(t, nil, onSrv("run", "--limit", "0", testKey(t), "--", "true")...)
	expectCode(t, r, 2)
	expectStderr(t, r, "--limit 0")
}

// A plain lock on a semaphore key names the kind and the flag to use.
func TestRunOnSemaphoreNamesKind(t *testing.T) {
	t.Parallel()
	c, _ := lib(t)
	sem := testKey(t)
	lk, err := c.Semaphore(sem, 3).TryAcquire(context.Background(), 1, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.Background())
	r := dlockRun(t, nil, onSrv("run", "-n", sem, "--", "true")...)
	expectCode(t, r, 125)
	expectStderr(t, r, "is a semaphore", "--limit")
}

// NOAUTH, WRONGPASS and a database the server lacks are named as such.
func TestConnectFailuresNamed(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{ExtraArgs: []string{"--requirepass", "s3cret"}})
	for _, tc := range []struct{ url, want string }{
		{"redis://" + s.Addr() + "/0", "authentication failed"},
		{"redis://:wrong@" + s.Addr() + "/0", "authentication failed"},
		{"redis://:s3cret@" + s.Addr() + "/99", "no such database"},
		{"redis://" + deadAddr + "/0", "cannot reach Redis"},
	} {
		r := dlockRun(t, nil, "--redis", tc.url, "status", "k")
		expectCode(t, r, 125)
		expectStderr(t, r, tc.want)
	}

	// The first PING is not retried: a server that hangs up (or refuses)
	// is reported after one connection, not after the driver's retries.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepts atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			_ = c.Close()
		}
	}()
	r := dlockRun(t, nil, "--redis", "redis://"+ln.Addr().String()+"/0", "status", "k")
	expectCode(t, r, 125)
	if n := accepts.Load(); n != 1 {
		t.Errorf("the first PING made %d connections; want 1 (no retries)\n%v", n, r)
	}
}

// rediss:// with a CA file, a client certificate and key, and a server
// name, as URL parameters or flags.
func TestTLSOptions(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Config{TLS: true, TLSAuthClients: true})
	f := s.TLS
	base := "rediss://" + s.TLSAddr() + "/0"
	q := "?tls_ca=" + f.CA + "&tls_cert=" + f.ClientCert + "&tls_key=" + f.ClientKey + "&tls_server_name=" + f.ServerName
	key := testKey(t)
	r := dlockRun(t, nil, "--redis", base+q, "run", key, "--", "true")
	expectCode(t, r, 0)
	r = dlockRun(t, nil, "--redis", base, "--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey,
		"--tls-server-name", f.ServerName, "status", key)
	expectCode(t, r, 3)
	// Without the CA the server's certificate is not trusted; without the
	// client certificate the server refuses.
	expectCode(t, dlockRun(t, nil, "--redis", base, "status", key), 125)
	expectCode(t, dlockRun(t, nil, "--redis", base+"?tls_ca="+f.CA, "status", key), 125)
	// TLS options need rediss://.
	r = dlockRun(t, nil, "--redis", "redis://"+s.Addr()+"/0?tls_ca="+f.CA, "status", key)
	expectCode(t, r, 125)
	expectStderr(t, r, "need a rediss:// URL")
}

// demo with an explicit Redis that does not answer exits 125 and starts
// no private server, as README says; README names DLOCK_REDIS_URL too.
func TestDemoExplicitURLDown(t *testing.T) {
	t.Parallel()
	for _, env := range []string{"REDIS_URL", "DLOCK_REDIS_URL"} {
		r := dlockRun(t, []string{env + "=redis://" + deadAddr + "/0"}, "demo")
		expectCode(t, r, 125)
		if strings.Contains(r.stderr, "private") {
			t.Errorf("%s set: demo started a private server:\n%v", env, r)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(readme), "`demo` uses")
	if i < 0 {
		t.Fatal("README lost its sentence on where demo finds Redis")
	}
	para, _, _ := strings.Cut(string(readme[i:]), "\n\n")
	for _, want := range []string{"DLOCK_REDIS_URL", "REDIS_URL", "exits 125", "private redis-server"} {
		if !strings.Contains(para, want) {
			t.Errorf("README's demo sentence lacks %q:\n%s", want, para)
		}
	}
}

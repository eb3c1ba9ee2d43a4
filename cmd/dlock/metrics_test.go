package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestRunMetricsAddr(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	ready := filepath.Join(t.TempDir(), "ready")
	key := testKey(t)
	p := startDlock(t, nil, onSrv("run", "--metrics-addr", addr, key, "--", "sh", "-c", "touch "+ready+"; sleep 1")...)
	waitFor(t, 10*time.Second, "the command to start", func() bool { return fileExists(ready) })
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{"dlock_held 1\n", `dlock_acquires_total{result="acquired"} 1`, "# TYPE dlock_lost_total counter", "dlock_lock_fence ", "dlock_lock_deadline_seconds "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	expectCode(t, p.wait(30*time.Second), 0)
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after dlock exited")
	}
	// An address that cannot be listened on: 125 before the command runs.
	r := dlockRun(t, nil, onSrv("run", "--metrics-addr", "256.0.0.1:1", testKey(t), "--", "true")...)
	expectCode(t, r, 125)
	expectStderr(t, r, "--metrics-addr")
}

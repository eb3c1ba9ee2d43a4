package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
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
	waitFor(t, 30*time.Second, "the command to start", func() bool { return fileExists(ready) }) // dlock and sh starting on a loaded machine
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{"dlock_held 1\n", `dlock_acquires_total{result="acquired"} 1`, "# TYPE dlock_lost_total counter", "dlock_lock_fence ", "dlock_lock_deadline_seconds ",
		"dlock_releases_total 0\n", "dlock_watchdog_behind_total 0\n", "dlock_renew_reports_dropped_total 0\n", "dlock_pubsub_redials_total 0\n"} {
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

// TestRunMetricsHandoff: dlock run queued behind a holder and handed the
// lock at its release shows one acquire after waiting and one FIFO
// hand-off received, each under its own name.
func TestRunMetricsHandoff(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	ready := filepath.Join(t.TempDir(), "ready")
	key := testKey(t)
	holder := hold(t, key)
	p := startDlock(t, nil, onSrv("run", "--metrics-addr", addr, key, "--", "sh", "-c", "touch "+ready+"; sleep 1")...)
	_, rdb := lib(t)
	adm := adminOn(t, rdb)
	waitFor(t, 30*time.Second, "dlock to queue for the lock", func() bool {
		info, err := adm.Inspect(context.Background(), key)
		return err == nil && info.Queued > 0
	})
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the command to start", func() bool { return fileExists(ready) })
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"dlock_waits_total 1\n", "dlock_acquired_after_wait_total 1\n", "dlock_handoffs_received_total 1\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	expectCode(t, p.wait(30*time.Second), 0)
}

// Every counter of Stats is printed, each under its own name, as a counter.
func TestWriteMetricsStats(t *testing.T) {
	var b strings.Builder
	writeMetrics(&b, dlock.Stats{
		Acquired: 1, NotAcquired: 2, Errors: 3, Waits: 4, Handoffs: 5, Renewals: 6, RenewalFailures: 7,
		Lost: 8, Behind: 9, RenewReportsDropped: 10, PubSubRedials: 11, Released: 12, Held: 13, Waiting: 14, Refusals: 16,
		ReleasesLeft: 17, ReleasesResent: 18,
	}, 15, nil)
	for _, want := range []string{
		"# TYPE dlock_held gauge\ndlock_held 13\n",
		"# TYPE dlock_waiting gauge\ndlock_waiting 14\n",
		`dlock_acquires_total{result="acquired"} 1` + "\n",
		`dlock_acquires_total{result="not_acquired"} 2` + "\n",
		`dlock_acquires_total{result="error"} 3` + "\n",
		"# TYPE dlock_waits_total counter\ndlock_waits_total 4\n",
		// Stats.Handoffs are the FIFO hand-offs received, not what
		// dlock_acquired_after_wait_total counts (acquires after waiting).
		"# TYPE dlock_handoffs_received_total counter\ndlock_handoffs_received_total 5\n",
		"# TYPE dlock_acquired_after_wait_total counter\ndlock_acquired_after_wait_total 15\n",
		`dlock_renewals_total{result="ok"} 6` + "\n",
		`dlock_renewals_total{result="error"} 7` + "\n",
		"# TYPE dlock_lost_total counter\ndlock_lost_total 8\n",
		"# TYPE dlock_watchdog_behind_total counter\ndlock_watchdog_behind_total 9\n",
		"# TYPE dlock_renew_reports_dropped_total counter\ndlock_renew_reports_dropped_total 10\n",
		"# TYPE dlock_pubsub_redials_total counter\ndlock_pubsub_redials_total 11\n",
		"# TYPE dlock_releases_total counter\ndlock_releases_total 12\n",
		"# TYPE dlock_refusals_total counter\ndlock_refusals_total 16\n",
		"# TYPE dlock_releases_left_total counter\ndlock_releases_left_total 17\n",
		"# TYPE dlock_releases_resent_total counter\ndlock_releases_resent_total 18\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "dlock_handoffs_total") {
		t.Errorf("dlock_handoffs_total is printed; it was dropped for dlock_acquired_after_wait_total:\n%s", b.String())
	}
	if strings.Contains(b.String(), "dlock_lock_fence") {
		t.Errorf("a lock's gauges without a lock:\n%s", b.String())
	}
}

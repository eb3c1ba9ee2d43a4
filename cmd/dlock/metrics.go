package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
)

// metricsServer is --metrics-addr: /metrics in the Prometheus text format,
// from the Client's Stats and the held lock, for the life of `dlock run`.
// It is written by hand so the core module needs no Prometheus client; the
// names match package dlockprom where they overlap.
type metricsServer struct {
	srv  *http.Server
	c    *dlock.Client
	lock atomic.Pointer[dlock.Lock] // set once acquired
	// afterWait counts the Lock calls that waited and acquired, which
	// Stats does not count apart (dlockprom counts them from the hook too).
	afterWait atomic.Uint64
}

// startMetrics listens on addr (before the lock is awaited, so waiting
// shows too) and serves until stop.
func startMetrics(addr string, c *dlock.Client) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &metricsServer{c: c}
	c.AddHooks(dlock.Hooks{Acquire: func(_ context.Context, i dlock.AcquireInfo) {
		if i.Waited && i.Err == nil {
			m.afterWait.Add(1)
		}
	}})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", m.serve)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

func (m *metricsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
}

func (m *metricsServer) serve(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	writeMetrics(w, m.c.Stats(), m.afterWait.Load(), m.lock.Load())
}

// writeMetrics writes s, afterWait (Lock calls that waited and acquired)
// and the gauges of lk, if held.
func writeMetrics(w io.Writer, s dlock.Stats, afterWait uint64, lk *dlock.Lock) {
	metric := func(name, typ, help string, samples ...string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		for _, s := range samples {
			fmt.Fprintf(w, "%s%s\n", name, s)
		}
	}
	n := func(v any) string { return fmt.Sprintf(" %v", v) }
	metric("dlock_held", "gauge", "Locks held now.", n(s.Held))
	metric("dlock_waiting", "gauge", "Lock calls waiting now.", n(s.Waiting))
	metric("dlock_acquires_total", "counter", "Acquire calls by result.",
		`{result="acquired"}`+n(s.Acquired), `{result="not_acquired"}`+n(s.NotAcquired), `{result="error"}`+n(s.Errors))
	metric("dlock_waits_total", "counter", "Lock calls that had to wait.", n(s.Waits))
	metric("dlock_acquired_after_wait_total", "counter", "Lock calls that found the key held, waited, and acquired it (by a hand-off, a release or an expiry).", n(afterWait))
	metric("dlock_handoffs_received_total", "counter", "FIFO hand-offs received by queued Lock calls (Stats.Handoffs).", n(s.Handoffs))
	metric("dlock_renewals_total", "counter", "Renewals by result.",
		`{result="ok"}`+n(s.Renewals), `{result="error"}`+n(s.RenewalFailures))
	metric("dlock_lost_total", "counter", "Locks lost while held.", n(s.Lost))
	metric("dlock_releases_total", "counter", "Successful releases.", n(s.Released))
	metric("dlock_watchdog_behind_total", "counter", "Warnings that the watchdog fell behind its renewals.", n(s.Behind))
	metric("dlock_renew_reports_dropped_total", "counter", "Watchdog renewals not reported to the Renew hook, which fell too far behind.", n(s.RenewReportsDropped))
	metric("dlock_pubsub_redials_total", "counter", "Pub/sub connections replaced because they missed their liveness probe.", n(s.PubSubRedials))
	metric("dlock_refusals_total", "counter", "Calls a Redis node refused before running them during a Cluster topology change (TRYAGAIN, ASK, MOVED...), sent again.", n(s.Refusals))
	metric("dlock_releases_left_total", "counter", "Locks whose release no reply confirmed before their deadline, left to expire by their TTL.", n(s.ReleasesLeft))
	metric("dlock_releases_resent_total", "counter", "Releases sent again after a Sentinel client reached a new master (Options.ReleaseResendWindow).", n(s.ReleasesResent))
	if lk != nil && lk.Err() == nil {
		metric("dlock_lock_fence", "gauge", "Fencing token of the lock this run holds.", n(lk.Fence()))
		metric("dlock_lock_deadline_seconds", "gauge", "Seconds until the held lock's deadline (renewed by the watchdog).",
			fmt.Sprintf(" %.3f", time.Until(lk.Deadline()).Seconds()))
	}
}

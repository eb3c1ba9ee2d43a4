// Package faults is dlock's fault-injection suite: it runs locks against
// real redis-server processes (one server, Sentinel, Cluster, Redlock)
// while injecting faults, records every operation as a history, and checks
// the histories against the invariants S1–S3, R1–R2 and L1–L4 (check.go). The package
// holds the recorder, the checker and the porcupine model; the scenarios
// are its tests. It is a test harness and exports nothing.
//
//	go test -race ./faults/                 # the quick tier (2-3 minutes)
//	go test -v ./faults/                    # ... and print the table
//	cd faults && go test                    # (local directory mode prints it too)
//	DLOCK_SOAK=1 go test ./faults/ -run Soak -timeout 30m   # the seeded random-mix soak
//
// Environment: DLOCK_SEED fixes the seed (printed in the table);
// DLOCK_SOAK=1 (or -soak) adds the soak, DLOCK_SOAK_DURATION (default
// 10m) or DLOCK_SOAK_ROUNDS sizes it; DLOCK_FAULTS_REPORT=file writes the
// table to a file; DLOCK_FAULTS_SAVE=1 keeps every history as JSON
// (histories with unexpected violations are always kept), under
// DLOCK_FAULTS_OUT (default $TMPDIR/dlock-faults), with porcupine's HTML
// visualization when S3 rejected one. DLOCK_FAULTS_STRICT=1 judges the
// rows whose defect's fix a probe finds missing in the build (they are
// otherwise shown as pending) and fails a history with MONITOR lines the
// replay could not parse (otherwise counted in the figures);
// DLOCK_FAULTS_REPLAY=file.json with -run TestReplay re-checks a saved
// history and prints its operations.
//
// # Faults
//
// Server faults (stalls, crashes, restarts, failovers, a Cluster's slots
// moved between masters while in use, a proxy's latency, blackholes and
// resets), process faults (SIGSTOP, SIGKILL of child
// holders), command-level faults on a Client's own connections
// (internal/faultcmd: a reply dropped after the command ran, a command
// failed before it was sent, delayed, or held until another completed; by
// a seeded random schedule or a rule aimed at one step), scheduler pauses
// at the engine's pause points (internal/probe), and CPU load: a hog of
// busy processes and goroutines beside the clients (Load; the report's
// load column). Spans in which the test process itself was not scheduled
// are recorded (stallProc); R2 and L1 do not count them against the
// library.
//
// # Histories
//
// A worker (worker.go) takes locks through a recorded dlock Client (a node) and
// writes to a protected resource, a key on a separate redis-server that
// is never faulted, with fenced.Set or, for the canaries, a plain SET.
// Every step is an invoke event and an ok, fail or info (unknown outcome)
// event: Lock/TryLock (with the context's deadline), every watchdog
// renewal (from the Renew hook; its send time is recovered from the new
// deadline), Unlock, the lost-lock signal, resource writes and a final
// read. The nemesis records its faults (spans, process pauses, crashes).
// Workers run in the test process, or in child processes (the test binary
// re-executed) when a holder must be stopped with SIGSTOP or killed; a
// child streams its events to the parent on the parent's time base (see
// timeBase for how, and for the one assumption it makes, which is checked).
// On a single server, MONITOR records every command the server executes,
// including those scripts run: the server-side view.
//
// # Invariants and how they are checked (check.go)
//
//   - S1, no two believed-held intervals of a key overlap. A grant is
//     believed held from the moment Lock returned until the first of:
//     Unlock called, the loss signalled, its process killed, and its last
//     validity deadline (Lock.Deadline after the grant or a renewal).
//     Intervals of different grants are swept per key.
//   - S2, the resource never accepts a stale fence, and fences are unique
//     and increasing. A write accepted although a write with a newer fence
//     (or the same fence from another owner) had completed before it was
//     sent; a read that returns an older fence than such a write; two
//     grants with one fence; a grant with a smaller fence than a grant that
//     had returned before it was called.
//   - S3, the history is linearizable (porcupine, model.go): per lock key
//     a lease-aware set of holders (a grant only if every holder it
//     conflicts with can have lapsed on the server, which needs send time +
//     TTL: a writer conflicts with everyone, a reader with writers, a
//     semaphore grant with the permits beyond its limit; a reentrant
//     owner's handles share its hold; fences increase; renew and release
//     only by the holder), per resource a fenced register. Unknown
//     outcomes are nondeterministic steps. S1 checks the same
//     compatibility on believed-held intervals, and counts semaphore
//     permits against the limit. An operator's ReleaseToken or
//     ForceRelease (admin.go) ends the holds it released, in both: a
//     holder it released still believes it holds until its renewal says
//     otherwise, and those permits are no longer counted as its.
//   - R1, release and renewal never touch another owner's lock. From the
//     MONITOR log: a script run for token T (its ARGV[1]) that writes the
//     lock key while it holds another token whose TTL has not run out by
//     the script's clock (read after its EVALSHA's line, before its first
//     command's: a stalled server runs a script later than its line
//     says). A command sent outside any script (it carries no token) that
//     writes a lock key while it holds a token whose Redis TTL has not run
//     out is foreign too (keys without a TTL, the legacy protocol's, are
//     not judged). Each R1 detail quotes the key's latest commands. A
//     MONITOR line that cannot be parsed leaves the keys' states unknown
//     from there on; the report counts such lines.
//   - R2, the holder is told of a loss by its deadline: the lost signal
//     comes at most R2Slack after the deadline (or after the grant's
//     return, if that was later), unless the holder's own process was
//     stopped then.
//   - L1, Lock returns by its context's deadline + L1Slack.
//   - L2, after a holder is killed, a waiter gets the lock within L2Bound
//     (TTL + a third of the waiter lease + ε).
//   - L3, O(1) server commands per hand-off: top-level commands in the
//     MONITOR log during a chain of hand-offs, divided by the hand-offs.
//   - L4, no orphan: from the MONITOR log, how long the lock key held a
//     token set by a script that no grant ever returned (an acquire whose
//     reply was lost, a hand-off nobody confirmed), at most L4Bound.
//
// Leader elections (TestElectionHistories, under the random command-fault
// schedule, with and without proxy resets, DEBUG SLEEP and latency) have
// their own invariants: E1, at most one leader acts per term and the terms'
// acting spans (each act timed before its leadership check) neither overlap
// nor go back; E2, every term a Campaign returned is in the election's
// history, whose terms strictly increase; E3, every observer's sequence is
// a subsequence of the history with strictly increasing (term, revision),
// and, once the faults stop, holds every leader since its first (no silent
// gap).
//
// # Canaries
//
// Scenarios whose violation is a documented limit (a paused holder and an
// unfenced resource, a restart without persistence, everysec power loss,
// failover of an unreplicated grant, a zombie master, Redlock restarts and
// clock jumps, a naive client, a go-redis client without
// ContextTimeoutEnabled, Barging under a herd) and two checker canaries
// (an unchecked release, an acquire nobody cleans up) must show their
// violation: if one stops detecting it, the suite fails.
package faults

package faults

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// timeBaseEnv is the environment variable through which a child process
// receives its parent's time base: the parent clock's zero as Unix
// nanoseconds on the wall clock and as nanoseconds on the system's
// CLOCK_MONOTONIC, "wall,mono".
const timeBaseEnv = "DLOCK_FAULTS_CLOCK"

// timeBase is the suite's one time base: nanoseconds since the parent test
// process started its timeBase, read from the monotonic clock. Every event of
// a history carries a time on this base, whichever process recorded it.
//
// Go's monotonic readings are relative to each process's start, so a child
// process receives its parent's zero as a reading of the system's
// CLOCK_MONOTONIC (timeBaseEnv), which every process on the machine shares,
// places its own start on the base by that clock once, at start-up, and
// from then on measures monotonic offsets from that start. A step of the
// wall clock (a VM resumed from a snapshot, an NTP step) moves neither. The
// harness checks the placement per child: the child's first event must
// fall between the moment the parent started it and the moment the parent
// read that event.
//
// Redis reports wall-clock times (MONITOR); Wall converts them the same way.
type timeBase struct {
	start  time.Time // carries a monotonic reading
	offset int64     // the base time of start, in ns
	zero   int64     // the base's zero, Unix ns on the wall clock
	mono   int64     // the base's zero, ns on the system's CLOCK_MONOTONIC
}

// newTimeBase starts a time base at zero now.
func newTimeBase() *timeBase {
	now := time.Now()
	return &timeBase{start: now, zero: now.UnixNano(), mono: monoNow()}
}

// monoNow reads the system's CLOCK_MONOTONIC, in ns.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("faults: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// timeBaseFromEnv returns the time base a parent passed in timeBaseEnv, or nil if
// there is none.
func timeBaseFromEnv() (*timeBase, error) {
	v := os.Getenv(timeBaseEnv)
	if v == "" {
		return nil, nil
	}
	w, m, _ := strings.Cut(v, ",")
	zero, err := strconv.ParseInt(w, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("faults: bad %s %q: %w", timeBaseEnv, v, err)
	}
	mono, err := strconv.ParseInt(m, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("faults: bad %s %q: %w", timeBaseEnv, v, err)
	}
	now := time.Now()
	return &timeBase{start: now, offset: monoNow() - mono, zero: zero, mono: mono}, nil
}

// Env returns the "NAME=value" entry that gives a child this time base.
func (c *timeBase) Env() string {
	return timeBaseEnv + "=" + strconv.FormatInt(c.zero, 10) + "," + strconv.FormatInt(c.mono, 10)
}

// Now returns the current time on the base.
func (c *timeBase) Now() int64 { return c.offset + int64(time.Since(c.start)) }

// At converts t, which must carry a monotonic reading (time.Now and times
// derived from it by Add do), to the base.
func (c *timeBase) At(t time.Time) int64 { return c.offset + int64(t.Sub(c.start)) }

// Wall converts a wall-clock instant, given as Unix nanoseconds, to the base.
func (c *timeBase) Wall(unixNano int64) int64 { return unixNano - c.zero }

// dur formats a duration on the base in milliseconds, for reports.
func dur(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e6, 'f', 1, 64) + "ms"
}

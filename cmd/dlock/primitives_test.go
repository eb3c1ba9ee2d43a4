package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// maxConcurrent replays a log of "+" and "-" lines (a run starting and
// ending) and returns the most runs inside at once.
func maxConcurrent(t *testing.T, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	in, most := 0, 0
	for _, l := range strings.Fields(string(b)) {
		if l == "+" {
			in++
		} else {
			in--
		}
		most = max(most, in)
	}
	return most
}

// runMany starts n dlock runs with args, each logging its start and end
// around a short sleep, waits for all, and returns the log's peak.
func runMany(t *testing.T, n int, args ...string) int {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	// Each run holds for 1s: long enough that the runs started one after
	// the other (race-enabled binaries, a busy machine) are all waiting
	// or holding at once, so the limit, not the start-up, sets how many
	// overlap.
	script := "echo + >> " + log + "; sleep 1; echo - >> " + log
	var ps []*proc
	for range n {
		all := append([]string{"run", "-c", script}, args...) // KEY last: flags go before it
		ps = append(ps, startDlock(t, nil, onSrv(all...)...))
	}
	for _, p := range ps {
		expectCode(t, p.wait(30*time.Second), 0)
	}
	return maxConcurrent(t, log)
}

func TestRunShared(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	if got := runMany(t, 4, "-s", key); got < 2 {
		t.Fatalf("4 shared runs: at most %d at once, want them to overlap", got)
	}
	// A writer (plain run) excludes readers: mixed runs never overlap a writer.
	log := filepath.Join(t.TempDir(), "log")
	reader := "echo r+ >> " + log + "; sleep 0.2; echo r- >> " + log
	writer := "echo w+ >> " + log + "; sleep 0.2; echo w- >> " + log
	var ps []*proc
	for i := range 6 {
		args := []string{"run", "-c", writer, key}
		if i%3 != 0 {
			args = []string{"run", "-s", "-c", reader, key}
		}
		ps = append(ps, startDlock(t, nil, onSrv(args...)...))
	}
	for _, p := range ps {
		expectCode(t, p.wait(30*time.Second), 0)
	}
	b, _ := os.ReadFile(log)
	readers, writers := 0, 0
	for _, l := range strings.Fields(string(b)) {
		switch l {
		case "r+":
			readers++
		case "r-":
			readers--
		case "w+":
			writers++
		case "w-":
			writers--
		}
		if writers > 1 || (writers == 1 && readers > 0) {
			t.Fatalf("a writer overlapped another holder:\n%s", b)
		}
	}
}

func TestRunLimit(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	if got := runMany(t, 5, "--limit", "2", key); got != 2 {
		t.Fatalf("5 runs with --limit 2: at most %d at once, want exactly 2", got)
	}
}

func TestStatusSemaphore(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	ready, gate := filepath.Join(t.TempDir(), "ready"), filepath.Join(t.TempDir(), "gate")
	p := startDlock(t, nil, onSrv("run", "--limit", "3", key, "--", "sh", "-c",
		"touch "+ready+"; while [ ! -e "+gate+" ]; do sleep 0.02; done")...)
	waitFor(t, 10*time.Second, "the command to start", func() bool { return fileExists(ready) })
	r := dlockRun(t, nil, onSrv("status", key)...)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expectCode(t, r, 0)
	if !strings.Contains(r.stdout, "semaphore (1 permits held by 1 holders") {
		t.Errorf("status of a semaphore:\n%v", r)
	}
	expectCode(t, p.wait(30*time.Second), 0)
}

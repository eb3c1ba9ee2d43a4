package dlock

import "testing"

// newer delivers what came after the last delivered record, oldest first,
// and marks a gap when the history may no longer reach back to it.
func TestNewerRecords(t *testing.T) {
	hist := func(from, to uint64) []LeaderInfo { // newest first
		var out []LeaderInfo
		for term := to; term >= from; term-- {
			out = append(out, LeaderInfo{Term: term, Rev: 1})
		}
		return out
	}
	got := newer(hist(1, 10), LeaderInfo{Term: 7, Rev: 1})
	if len(got) != 3 || got[0].Term != 8 || got[2].Term != 10 || got[0].Missed {
		t.Fatalf("after 7: %+v", got)
	}
	got = newer([]LeaderInfo{{Term: 7, Rev: 2}, {Term: 6, Rev: 1}}, LeaderInfo{Term: 7, Rev: 1})
	if len(got) != 1 || got[0].Rev != 2 {
		t.Fatalf("a proclaimed value: %+v", got)
	}
	if got = newer(hist(1, 10), LeaderInfo{Term: 10, Rev: 1}); len(got) != 0 {
		t.Fatalf("nothing new: %+v", got)
	}
	// A full history that is all newer than the last delivered: leaders
	// may have been lost in between.
	got = newer(hist(101, 100+historyLen), LeaderInfo{Term: 50, Rev: 1})
	if len(got) != historyLen || !got[0].Missed || got[1].Missed {
		t.Fatalf("full history after a gap: first %+v, %d records", got[0], len(got))
	}
	// The same history reaching back to the last delivered: no gap.
	got = newer(hist(100, 99+historyLen), LeaderInfo{Term: 100, Rev: 1})
	if len(got) != historyLen-1 || got[0].Missed {
		t.Fatalf("full history without a gap: first %+v, %d records", got[0], len(got))
	}
}

// A full history of one leader's values that no longer reaches back to
// the last delivered revision is a gap too; one that follows it is not.
func TestNewerRecordsRevisionGap(t *testing.T) {
	revs := func(term, from, to uint64) []LeaderInfo { // newest first
		var out []LeaderInfo
		for rev := to; rev >= from; rev-- {
			out = append(out, LeaderInfo{Term: term, Rev: rev})
		}
		return out
	}
	got := newer(revs(7, 20, 19+historyLen), LeaderInfo{Term: 7, Rev: 3})
	if len(got) != historyLen || !got[0].Missed {
		t.Fatalf("full history after a gap in revisions: first %+v, %d records", got[0], len(got))
	}
	got = newer(revs(7, 4, 3+historyLen), LeaderInfo{Term: 7, Rev: 3})
	if len(got) != historyLen || got[0].Missed {
		t.Fatalf("full history right after the last delivered: first %+v, %d records", got[0], len(got))
	}
}

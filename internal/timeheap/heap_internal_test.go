package timeheap

import (
	"math/rand/v2"
	"testing"
)

type heapTestItem struct {
	at   int64
	slot int32
}

// checkHeap fails t unless h is a heap of exactly the items of want, each
// item's slot leading to its entry and back.
func checkHeap(t *testing.T, h *Heap[*heapTestItem], want map[*heapTestItem]bool) {
	t.Helper()
	if h.Len() != len(want) {
		t.Fatalf("heap holds %d items, want %d", h.Len(), len(want))
	}
	for i, it := range h.ls {
		if p := (i - 1) / heapArity; i > 0 && h.ls[p].at > it.at {
			t.Fatalf("entry %d (at %d) is earlier than its parent %d (at %d)", i, it.at, p, h.ls[p].at)
		}
		x := h.xs[it.id]
		if !want[x] || x.slot != it.id || h.pos[it.id] != int32(i) || x.at != it.at {
			t.Fatalf("entry %d: slot %d, item %+v, pos %d", i, it.id, x, h.pos[it.id])
		}
	}
	n := 0
	for x := range h.All() {
		if !want[x] {
			t.Fatalf("All yields %+v, not in the heap", x)
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("All yields %d items, want %d", n, len(want))
	}
}

// The renewal, deadline and retry heaps keep their order and every item's
// slot through pushes, pops, moves and removals, and through the
// compaction after a mass removal.
func TestTimeHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hv := New(func(x *heapTestItem) *int32 { return &x.slot })
	h := &hv
	in := map[*heapTestItem]bool{}
	var items []*heapTestItem
	pick := func() *heapTestItem {
		for _, x := range items {
			if in[x] {
				return x
			}
		}
		return nil
	}
	for round := range 6 {
		// Grow past the compaction threshold, then shrink below it.
		grow := 3000
		if round%2 == 1 {
			grow = 50
		}
		for range grow {
			x := &heapTestItem{at: r.Int64N(1000), slot: -1}
			items = append(items, x)
			in[x] = true
			top := h.Push(x.at, x)
			if top != (h.TopAt() == x.at && h.Top() == x) {
				t.Fatalf("push reported top %v", top)
			}
		}
		checkHeap(t, h, in)
		r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		for n := range 2900 {
			if h.Len() == 0 {
				break
			}
			switch n % 4 {
			case 0:
				min := h.TopAt()
				x := h.Pop()
				if x.at != min || x.slot != -1 || !in[x] {
					t.Fatalf("pop: %+v, want the earliest (%d), out of the heap", x, min)
				}
				for y := range in {
					if y.at < min {
						t.Fatalf("pop took %d before %d", min, y.at)
					}
				}
				delete(in, x)
			case 1:
				x := pick()
				if h.Remove(x.slot) != x || x.slot != -1 {
					t.Fatalf("remove took another item")
				}
				delete(in, x)
			case 2:
				x := pick()
				x.at = r.Int64N(1000)
				if top := h.Fix(x.slot, x.at); top != (h.Top() == x) {
					t.Fatalf("fix reported top %v", top)
				}
			case 3:
				x := h.Top()
				x.at += r.Int64N(500)
				h.FixTop(x.at)
			}
			if n%97 == 0 {
				checkHeap(t, h, in)
			}
		}
		checkHeap(t, h, in)
	}
	for h.Len() > 10 {
		delete(in, h.Pop())
	}
	checkHeap(t, h, in)
	if cap(h.ls) > 1024 || len(h.xs) > 1024 {
		t.Errorf("heap of %d keeps room for %d entries and %d slots after removals", h.Len(), cap(h.ls), len(h.xs))
	}
}

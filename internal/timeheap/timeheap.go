// Package timeheap is a min-heap of items by time that moves or removes an
// item in O(log n) without a search: each item keeps its slot id in
// itself. dlock's watchdog keeps its leases (by next renewal, by deadline)
// and its blocked calls (by next retry) in heaps of this kind.
package timeheap

import "iter"

// Heap is a min-heap by time of items (for dlock's watchdog: leases, in
// the renewal and deadline heaps, or blocked calls, in the retry heap; the
// times in ns since the watchdog's epoch) that moves or removes an item in
// O(log n) without a search. Each
// item in the heap holds a slot id, kept in the item itself (ref returns
// where; -1: not in the heap), and the heap keeps each slot's index in a
// table of its own: sifting moves entries of two dense arrays and never
// touches the items, each of which (a lease: hundreds of bytes, among
// 100,000) would cost a cache miss at every level. Each entry carries its
// time (a deadline item's may be earlier than its lease's deadline: see
// the watchdog's take). It is 4-ary: half the levels of a binary heap, and
// a node's children share a cache line. It is not safe for concurrent use:
// the watchdog guards its heaps by its mu.
type Heap[T any] struct {
	ls   []heapItem     // the heap
	pos  []int32        // pos[id]: slot id's index in ls
	xs   []T            // xs[id]: slot id's item
	free []int32        // slot ids not in use
	ref  func(T) *int32 // the item's slot id
}

type heapItem struct {
	at int64
	id int32
}

// heapArity is the number of children of a node.
const heapArity = 4

// New returns an empty heap whose items keep their slot id where ref
// says.
func New[T any](ref func(T) *int32) Heap[T] {
	return Heap[T]{ref: ref}
}

// Len, Top and TopAt return the number of items, the earliest item and
// its time; Top and TopAt need an item in the heap.
func (h *Heap[T]) Len() int     { return len(h.ls) }
func (h *Heap[T]) Top() T       { return h.xs[h.ls[0].id] }
func (h *Heap[T]) TopAt() int64 { return h.ls[0].at }

// All yields every item in the heap, in no particular order. The heap must
// not change while it runs.
func (h *Heap[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, it := range h.ls {
			if !yield(h.xs[it.id]) {
				return
			}
		}
	}
}

// Push adds x at time at and reports whether it became the top.
func (h *Heap[T]) Push(at int64, x T) bool {
	var id int32
	if n := len(h.free); n > 0 {
		id = h.free[n-1]
		h.free = h.free[:n-1]
		h.xs[id] = x
	} else {
		id = int32(len(h.xs))
		h.xs = append(h.xs, x)
		h.pos = append(h.pos, 0)
	}
	*h.ref(x) = id
	h.ls = append(h.ls, heapItem{at, id})
	return h.up(len(h.ls)-1) == 0
}

// Pop takes out the earliest item.
func (h *Heap[T]) Pop() T {
	return h.removeAt(0)
}

// Remove takes out the item in slot id.
func (h *Heap[T]) Remove(id int32) T {
	return h.removeAt(int(h.pos[id]))
}

// Fix moves the item in slot id to time at and reports whether it is
// the top.
func (h *Heap[T]) Fix(id int32, at int64) bool {
	i := int(h.pos[id])
	h.ls[i].at = at
	h.sift(i)
	return h.pos[id] == 0
}

// FixTop moves the top item to time at.
func (h *Heap[T]) FixTop(at int64) {
	h.ls[0].at = at
	h.down(0)
}

// removeAt takes out the item at index i.
func (h *Heap[T]) removeAt(i int) T {
	n := len(h.ls) - 1
	id := h.ls[i].id
	x := h.xs[id]
	if i != n {
		h.ls[i] = h.ls[n]
		h.pos[h.ls[i].id] = int32(i)
	}
	h.ls = h.ls[:n]
	if i < n {
		h.sift(i)
	}
	var zero T
	h.xs[id] = zero
	h.free = append(h.free, id)
	*h.ref(x) = -1
	// Give memory back after a mass release.
	if c := cap(h.ls); c > 1024 && len(h.ls) < c/4 {
		h.compact()
	}
	return x
}

// compact reallocates the heap and its slot tables at its size, the
// slots renumbered in heap order.
func (h *Heap[T]) compact() {
	n := len(h.ls)
	ls, pos, xs := make([]heapItem, n), make([]int32, n), make([]T, n)
	for i, it := range h.ls {
		x := h.xs[it.id]
		ls[i], pos[i], xs[i] = heapItem{it.at, int32(i)}, int32(i), x
		*h.ref(x) = int32(i)
	}
	h.ls, h.pos, h.xs, h.free = ls, pos, xs, nil
}

func (h *Heap[T]) sift(i int) {
	if h.up(i) == i {
		h.down(i)
	}
}

// up moves the item at i towards the top while it is earlier than its
// parent, and returns where it ends.
func (h *Heap[T]) up(i int) int {
	it := h.ls[i]
	for i > 0 {
		p := (i - 1) / heapArity
		if h.ls[p].at <= it.at {
			break
		}
		h.ls[i] = h.ls[p]
		h.pos[h.ls[i].id] = int32(i)
		i = p
	}
	h.ls[i] = it
	h.pos[it.id] = int32(i)
	return i
}

// down moves the item at i away from the top while a child is earlier.
func (h *Heap[T]) down(i int) {
	n := len(h.ls)
	it := h.ls[i]
	for {
		c := heapArity*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < min(c+heapArity, n); k++ {
			if h.ls[k].at < h.ls[m].at {
				m = k
			}
		}
		if it.at <= h.ls[m].at {
			break
		}
		h.ls[i] = h.ls[m]
		h.pos[h.ls[i].id] = int32(i)
		i = m
	}
	h.ls[i] = it
	h.pos[it.id] = int32(i)
}

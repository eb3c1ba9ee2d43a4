package rexec

import "unsafe"

// StringAt returns *p as a command argument: an any holding the string
// *p, exactly as any(*p) would, but referring to *p itself instead of to
// a copy, so without the allocation boxing a string costs. Hooks, cluster
// routing and the wire see the same string argument either way.
//
// *p must live in the heap (a field of an object reached by pointer) and
// must never be written again while the argument may be in use: by
// go-redis, by a hook, or by a pipeline its caller left before the reply.
func StringAt(p *string) any {
	a := any("") // a string's type word; the constant needs no allocation
	(*eface)(unsafe.Pointer(&a)).data = unsafe.Pointer(p)
	return a
}

// eface is the layout of an any: its dynamic type, and a pointer to its
// value (a string's value is its header).
type eface struct {
	typ, data unsafe.Pointer
}

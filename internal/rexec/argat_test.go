package rexec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestStringAt(t *testing.T) {
	p := new(string)
	*p = strings.Repeat("k", 40) // not a constant: a string of its own
	a := StringAt(p)
	if s, ok := a.(string); !ok || s != *p {
		t.Fatalf("StringAt = %#v, want the string %q", a, *p)
	}
	if a != any(*p) {
		t.Fatal("StringAt's argument is not equal to the boxed string")
	}
	if got := fmt.Sprint(a); got != *p {
		t.Fatalf("fmt.Sprint = %q", got)
	}
	runtime.GC() // the argument keeps *p alive
	if s := a.(string); s != strings.Repeat("k", 40) {
		t.Fatalf("after a GC: %q", s)
	}
	if n := testing.AllocsPerRun(100, func() { _ = StringAt(p) }); n != 0 {
		t.Fatalf("StringAt allocates %.0f times", n)
	}
}

package dlock

import (
	"strings"
	"testing"
)

func TestAuxKeysShareSlotAndDecode(t *testing.T) {
	keys := []string{"orders:1", "user:{42}:lock", "{42}", "a}b{", "{}x", "{}x{y}", "a{b", "}", "{", "{}", "x{}y{z}",
		"plain", "ünïcode", strings.Repeat("k", 1000), "a{b}c}d", "{{a}}", "{=}"}
	for _, k := range keys {
		base := auxBase("dlock", k)
		for _, suffix := range []string{fenceSuffix, wakeSuffix} {
			name := base + suffix
			if Slot(name) != Slot(k) {
				t.Errorf("key %q: aux %q in slot %d, key in slot %d", k, name, Slot(name), Slot(k))
			}
			back, ok := keyOfAux("dlock", suffix, name)
			if !ok || back != k {
				t.Errorf("key %q: aux %q decodes to %q, %v", k, name, back, ok)
			}
		}
	}
	if auxBase("dlock", "orders:1") == auxBase("dlock", "{orders:1}") {
		t.Error("a key and its braced form share auxiliary keys")
	}
}

// Known slots from Redis (CLUSTER KEYSLOT).
func TestSlotMatchesRedis(t *testing.T) {
	for k, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "123456789": 12739} {
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
}

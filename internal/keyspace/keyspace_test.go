package keyspace

import (
	"strings"
	"testing"
)

// refSlot is the Redis Cluster key-slot rule, written from the spec
// (cluster-spec: "Hash tags"), independently of Slot: hash the part
// between the first '{' and the first '}' after it, if that part is not
// empty; otherwise the whole key.
func refSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % 16384)
}

// FuzzAuxKeys: for any key and prefix, every auxiliary name (fence counter,
// queue, wake-up channel, a waiter's lease, the guard record) lives in the
// key's Cluster slot and decodes back to the key; different keys never
// share auxiliary names; Slot agrees with the spec's rule.
func FuzzAuxKeys(f *testing.F) {
	for _, k := range []string{"orders:1", "user:{42}:lock", "{42}", "a}b{", "{}x", "{}x{y}", "a{b", "}", "{", "{}",
		"x{}y{z}", "{{a}}", "{=}", "{}}", "}{", "a{}", "{a}{b}", "#x", "{#}", "a:fence", "{x}=y", "ünï{cöde}", "\x00{\x00}"} {
		f.Add(k, "dlock", "{}")
		f.Add(k, "app:v2", "other")
	}
	f.Fuzz(func(t *testing.T, key, prefix, other string) {
		if key == "" || len(key) > 64<<10 || strings.ContainsAny(prefix, "{}#") {
			t.Skip()
		}
		if Slot(key) != refSlot(key) {
			t.Fatalf("Slot(%q) = %d, the spec's rule gives %d", key, Slot(key), refSlot(key))
		}
		ks := Keys(prefix, key)
		if ks.Lock != key {
			t.Fatalf("lock key %q, want the key itself %q", ks.Lock, key)
		}
		slot := Slot(key)
		names := map[string]string{"fence": ks.Fence, "queue": ks.Queue, "wake": ks.Wake,
			"waiters": ks.Waiters, "tombs": ks.Tombs, "op": ks.Queue + ":" + strings.Repeat("t", TokenLen), "guard": Base("dlock", key) + GuardSuffix}
		for what, name := range names {
			if Slot(name) != slot {
				t.Fatalf("key %q (slot %d), prefix %q: %s %q is in slot %d", key, slot, prefix, what, name, Slot(name))
			}
			if name == key {
				t.Fatalf("key %q: %s name is the key itself", key, what)
			}
		}
		for suffix, name := range map[string]string{FenceSuffix: ks.Fence, QueueSuffix: ks.Queue, WakeSuffix: ks.Wake,
			WaitersSuffix: ks.Waiters, TombsSuffix: ks.Tombs} {
			back, ok := KeyOfAux(prefix, suffix, name)
			if !ok || back != key {
				t.Fatalf("key %q, prefix %q: %q decodes to %q, %v", key, prefix, name, back, ok)
			}
		}
		if other != "" && other != key {
			if Base(prefix, other) == Base(prefix, key) {
				t.Fatalf("keys %q and %q share auxiliary names %q", key, other, Base(prefix, key))
			}
		}
	})
}

func TestAuxKeysShareSlotAndDecode(t *testing.T) {
	keys := []string{"orders:1", "user:{42}:lock", "{42}", "a}b{", "{}x", "{}x{y}", "a{b", "}", "{", "{}", "x{}y{z}",
		"plain", "ünïcode", strings.Repeat("k", 1000), "a{b}c}d", "{{a}}", "{=}"}
	for _, k := range keys {
		base := Base("dlock", k)
		for _, suffix := range []string{FenceSuffix, WakeSuffix} {
			name := base + suffix
			if Slot(name) != Slot(k) {
				t.Errorf("key %q: aux %q in slot %d, key in slot %d", k, name, Slot(name), Slot(k))
			}
			back, ok := KeyOfAux("dlock", suffix, name)
			if !ok || back != k {
				t.Errorf("key %q: aux %q decodes to %q, %v", k, name, back, ok)
			}
		}
	}
	if Base("dlock", "orders:1") == Base("dlock", "{orders:1}") {
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

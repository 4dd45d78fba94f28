//go:build cgo && !linux

package membudget

// pebbleOffHeap: with cgo, Pebble allocates its memtables and block cache
// with the C allocator, outside the Go heap.
const pebbleOffHeap = true

// MallocArenas is 0: the arena cap is set on Linux only (glibc's
// M_ARENA_MAX; other systems' allocators have no such setting).
func MallocArenas() int { return 0 }

func arenaCapKnown() bool { return false }

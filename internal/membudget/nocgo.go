//go:build !cgo

package membudget

// pebbleOffHeap: without cgo, Pebble allocates its memtables and block
// cache from the Go heap.
const pebbleOffHeap = false

// MallocArenas is 0: without cgo no C allocator is used.
func MallocArenas() int { return 0 }

func arenaCapKnown() bool { return false }

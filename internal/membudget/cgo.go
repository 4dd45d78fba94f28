//go:build cgo

package membudget

// pebbleOffHeap: with cgo, Pebble allocates its memtables and block cache
// with the C allocator, outside the Go heap.
const pebbleOffHeap = true

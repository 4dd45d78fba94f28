//go:build !cgo

package membudget

// pebbleOffHeap: without cgo, Pebble allocates its memtables and block
// cache from the Go heap.
const pebbleOffHeap = false

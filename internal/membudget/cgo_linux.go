//go:build cgo && linux

package membudget

/*
#include <malloc.h>
#include <stdlib.h>

// Set before the Go runtime starts any thread: glibc gives each thread
// an arena on its first allocation, so a limit set later leaves the
// arenas of the threads started before it.
static int sluice_arenas = 0;

__attribute__((constructor)) static void sluice_limit_arenas(void) {
#ifdef M_ARENA_MAX
	if (getenv("MALLOC_ARENA_MAX") == NULL && mallopt(M_ARENA_MAX, 2) == 1) {
		sluice_arenas = 2;
	}
#endif
}

static int sluice_arenas_set(void) { return sluice_arenas; }

static int sluice_arena_max_known(void) {
#ifdef M_ARENA_MAX
	return 1;
#else
	return 0;
#endif
}
*/
import "C"

// pebbleOffHeap: with cgo, Pebble allocates its memtables and block cache
// with the C allocator, outside the Go heap.
const pebbleOffHeap = true

// MallocArenas is the cap this package put on the C allocator's arenas
// (glibc's M_ARENA_MAX) when the program started, or 0 if it put none
// (MALLOC_ARENA_MAX was set, or the C library has no such setting).
//
// Pebble's block caches and memtables allocate and free from every
// thread; glibc gives each thread an arena of its own, up to eight a core,
// and memory freed in one arena is reused only by allocations in it, so a
// budget's off-heap share grew by tens of MiB past what the caches and
// memtables hold (docs/benchmarks.md, item 20). Two arenas kept the fleet
// benchmark's peak RSS 40-90 MiB lower, at the same CPU.
func MallocArenas() int { return int(C.sluice_arenas_set()) }

// arenaCapKnown reports whether the C library has the arena setting
// (glibc does; musl has none).
func arenaCapKnown() bool { return C.sluice_arena_max_known() == 1 }

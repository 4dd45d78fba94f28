package rollup

// keyed is an element of a heap: its ordering key.
type keyed interface{ heapKey() int64 }

// minute is a minute of closing windows, in the close queue.
type minute int64

func (m minute) heapKey() int64 { return int64(m) }

// expiryEntry says that w may be dropped at (ns, processing time).
type expiryEntry struct {
	at int64
	w  *window
}

func (e expiryEntry) heapKey() int64 { return e.at }

// heap is a binary min-heap by heapKey. The smallest element is h[0].
type heap[T keyed] []T

func (h *heap[T]) push(v T) {
	*h = append(*h, v)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].heapKey() <= s[i].heapKey() {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *heap[T]) pop() T {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	var zero T
	s[n] = zero // no pointer kept past the end
	s = s[:n]
	s.down(0)
	*h = s
	return top
}

// filter keeps the elements for which keep is true, and restores the heap.
func (h *heap[T]) filter(keep func(T) bool) {
	s := *h
	kept := s[:0]
	for _, v := range s {
		if keep(v) {
			kept = append(kept, v)
		}
	}
	clear(s[len(kept):]) // no pointer kept past the end
	for i := len(kept)/2 - 1; i >= 0; i-- {
		kept.down(i)
	}
	*h = kept
}

// down moves s[i] down to its place.
func (s heap[T]) down(i int) {
	n := len(s)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s[c+1].heapKey() < s[c].heapKey() {
			c++
		}
		if s[i].heapKey() <= s[c].heapKey() {
			return
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
}

package rollup

// keyed is an element of a heap: its ordering key.
type keyed interface{ heapKey() int64 }

// minute is a minute of closing windows, in the close queue.
type minute int64

func (m minute) heapKey() int64 { return int64(m) }

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

// keptList is the intrusive, doubly linked list of kept windows, oldest
// keptAt at the head.
type keptList struct{ head, tail *window }

// pushBack appends w, which is in no list, as kept since at.
func (l *keptList) pushBack(w *window, at int64) {
	w.kept, w.keptAt = true, at
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

// remove unlinks w, which is in the list.
func (l *keptList) remove(w *window) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.kept, w.prev, w.next = false, nil, nil
}

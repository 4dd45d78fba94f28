package rollupfeed

import "time"

// queue is a 4-ary min-heap of pending devices on their since (or, for
// the retry queue, their retryAt), each device knowing its index. The keys
// are held in the heap itself, so that ordering it reads no device. A
// device's minutes mostly arrive in time order, so a push rarely moves far,
// and a roll pops the due ones from the top: O(log n) each, whatever the
// order in which devices became due.
type queue struct {
	es      []entry
	byRetry bool
	// epoch is the first time keyed: keys are ns since it by Time.Sub,
	// which, like the Before and After that decide what is due, reads the
	// monotonic clock when both times carry it, so that a step of the wall
	// clock (NTP, a resumed VM) cannot order the queue otherwise. Zero
	// until the first key.
	epoch time.Time
}

// arity is the heap's children per node: four halve a binary heap's depth,
// and so the swaps (each a write of two pointers) of a pop, while the four
// keys compared at each level are adjacent in memory.
const arity = 4

type entry struct {
	key int64 // ns since queue.epoch
	d   *pendingDevice
}

func (q *queue) len() int { return len(q.es) }

// first is the device due soonest (the queue is not empty).
func (q *queue) first() *pendingDevice { return q.es[0].d }

func (q *queue) keyOf(d *pendingDevice) int64 {
	t := d.since
	if q.byRetry {
		t = d.retryAt
	}
	if q.epoch.IsZero() {
		q.epoch = t
	}
	return int64(t.Sub(q.epoch))
}

func (q *queue) swap(i, j int) {
	q.es[i], q.es[j] = q.es[j], q.es[i]
	q.es[i].d.index, q.es[j].d.index = i, j
}

func (q *queue) push(d *pendingDevice) {
	d.index = len(q.es)
	q.es = append(q.es, entry{q.keyOf(d), d})
	q.up(d.index)
}

// remove takes the device at index i out of the queue.
func (q *queue) remove(i int) {
	last := len(q.es) - 1
	if i != last {
		q.swap(i, last)
	}
	q.es[last] = entry{}
	q.es = q.es[:last]
	if i != last {
		q.down(i)
		q.up(i)
	}
	if cap(q.es) > 1024 && len(q.es) < cap(q.es)/4 {
		// A burst's queue is not kept at its largest.
		q.es = append([]entry(nil), q.es...)
	}
}

// rekey moves the device at i towards the top after its key became
// earlier.
func (q *queue) rekey(i int) {
	q.es[i].key = q.keyOf(q.es[i].d)
	q.up(i)
}

func (q *queue) up(i int) {
	for i > 0 {
		parent := (i - 1) / arity
		if q.es[i].key >= q.es[parent].key {
			return
		}
		q.swap(i, parent)
		i = parent
	}
}

func (q *queue) down(i int) {
	n := len(q.es)
	for {
		l := arity*i + 1
		if l >= n {
			return
		}
		c := l
		for r := l + 1; r < min(l+arity, n); r++ {
			if q.es[r].key < q.es[c].key {
				c = r
			}
		}
		if q.es[c].key >= q.es[i].key {
			return
		}
		q.swap(i, c)
		i = c
	}
}

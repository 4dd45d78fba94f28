package rollup

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
)

// Int128 is an exact sum of int64 values: Hi×2⁶⁴ + Lo. A minute holds at
// most 60,000 values of a metric (one per millisecond), so its sum needs
// at most 80 bits, and adding the minutes of any range a query can ask for
// stays far inside 128: int sums are never rounded and never wrap.
type Int128 struct {
	Hi int64
	Lo uint64
}

// Int128Of returns v as an Int128.
func Int128Of(v int64) Int128 { return Int128{Hi: v >> 63, Lo: uint64(v)} }

// Add returns a+b.
func (a Int128) Add(b Int128) Int128 {
	lo, carry := bits.Add64(a.Lo, b.Lo, 0)
	return Int128{Hi: a.Hi + b.Hi + int64(carry), Lo: lo}
}

// Int64 returns a as an int64 and whether it fits one.
func (a Int128) Int64() (int64, bool) { return int64(a.Lo), a.Hi == int64(a.Lo)>>63 }

// Float64 returns a, rounded to the nearest float64.
func (a Int128) Float64() float64 {
	if v, ok := a.Int64(); ok {
		return float64(v)
	}
	f, _ := a.Big().Float64()
	return f
}

// Big returns a as a big.Int.
func (a Int128) Big() *big.Int {
	b := new(big.Int).Lsh(big.NewInt(a.Hi), 64)
	return b.Add(b, new(big.Int).SetUint64(a.Lo))
}

// String returns a in decimal, exactly.
func (a Int128) String() string {
	if v, ok := a.Int64(); ok {
		return strconv.FormatInt(v, 10)
	}
	return a.Big().String()
}

// Split returns the two Int64 columns that store a: lo, the sum itself
// whenever it fits an int64, and hi, 0 then; a = hi×2⁶⁴ + lo with lo
// signed.
func (a Int128) Split() (lo, hi int64) { return int64(a.Lo), a.Hi + int64(a.Lo>>63) }

// JoinInt128 is the inverse of Split.
func JoinInt128(lo, hi int64) Int128 { return Int128{Hi: hi - int64(uint64(lo)>>63), Lo: uint64(lo)} }

// Typed holds the aggregates of a minute's (or a step's) int, bool and
// string values; a row's float aggregates are Row's own fields, and its
// Count counts every value whatever its type. A field of a type whose
// count is 0 is zero. Of values with equal timestamps (only partial rows
// written before 2026-11-27 can have them), first and last keep the
// larger, as the float aggregates do, so that combining does not depend
// on the order of the rows.
type Typed struct {
	IntCount   uint64
	IntSum     Int128
	IntMin     int64
	IntMax     int64
	IntFirstTS int64
	IntFirst   int64
	IntLastTS  int64
	IntLast    int64

	BoolCount   uint64
	TrueCount   uint64
	BoolFirstTS int64
	BoolFirst   bool
	BoolLastTS  int64
	BoolLast    bool

	StrCount   uint64
	StrFirstTS int64
	StrFirst   string
	StrLastTS  int64
	StrLast    string
}

// HasTyped reports whether t counts any value that is not a float.
func (t *Typed) HasTyped() bool { return t.IntCount|t.BoolCount|t.StrCount != 0 }

// typedCount is the number of values t counts.
func (t *Typed) typedCount() uint64 { return t.IntCount + t.BoolCount + t.StrCount }

// addInt adds one int value at ts; values come in time order.
func (t *Typed) addInt(ts, v int64) {
	if t.IntCount == 0 {
		t.IntMin, t.IntMax, t.IntFirstTS, t.IntFirst = v, v, ts, v
	} else {
		t.IntMin, t.IntMax = min(t.IntMin, v), max(t.IntMax, v)
	}
	t.IntCount++
	t.IntSum = t.IntSum.Add(Int128Of(v))
	t.IntLastTS, t.IntLast = ts, v
}

// addBool adds one bool value at ts; values come in time order.
func (t *Typed) addBool(ts int64, v bool) {
	if t.BoolCount == 0 {
		t.BoolFirstTS, t.BoolFirst = ts, v
	}
	t.BoolCount++
	if v {
		t.TrueCount++
	}
	t.BoolLastTS, t.BoolLast = ts, v
}

// addStr adds one string value at ts; values come in time order.
func (t *Typed) addStr(ts int64, v string) {
	if t.StrCount == 0 {
		t.StrFirstTS, t.StrFirst = ts, v
	}
	t.StrCount++
	t.StrLastTS, t.StrLast = ts, v
}

// MergeTyped folds o into t: counts and sums add, the extremes are kept,
// the first is the earliest and the last the latest.
func (t *Typed) MergeTyped(o *Typed) {
	if o.IntCount > 0 {
		if t.IntCount == 0 {
			t.IntMin, t.IntMax, t.IntFirstTS, t.IntFirst, t.IntLastTS, t.IntLast = o.IntMin, o.IntMax, o.IntFirstTS, o.IntFirst, o.IntLastTS, o.IntLast
		} else {
			t.IntMin, t.IntMax = min(t.IntMin, o.IntMin), max(t.IntMax, o.IntMax)
			if o.IntFirstTS < t.IntFirstTS || o.IntFirstTS == t.IntFirstTS && o.IntFirst > t.IntFirst {
				t.IntFirstTS, t.IntFirst = o.IntFirstTS, o.IntFirst
			}
			if o.IntLastTS > t.IntLastTS || o.IntLastTS == t.IntLastTS && o.IntLast > t.IntLast {
				t.IntLastTS, t.IntLast = o.IntLastTS, o.IntLast
			}
		}
		t.IntCount += o.IntCount
		t.IntSum = t.IntSum.Add(o.IntSum)
	}
	if o.BoolCount > 0 {
		if t.BoolCount == 0 {
			t.BoolFirstTS, t.BoolFirst, t.BoolLastTS, t.BoolLast = o.BoolFirstTS, o.BoolFirst, o.BoolLastTS, o.BoolLast
		} else {
			if o.BoolFirstTS < t.BoolFirstTS || o.BoolFirstTS == t.BoolFirstTS && o.BoolFirst && !t.BoolFirst {
				t.BoolFirstTS, t.BoolFirst = o.BoolFirstTS, o.BoolFirst
			}
			if o.BoolLastTS > t.BoolLastTS || o.BoolLastTS == t.BoolLastTS && o.BoolLast && !t.BoolLast {
				t.BoolLastTS, t.BoolLast = o.BoolLastTS, o.BoolLast
			}
		}
		t.BoolCount += o.BoolCount
		t.TrueCount += o.TrueCount
	}
	if o.StrCount > 0 {
		if t.StrCount == 0 {
			t.StrFirstTS, t.StrFirst, t.StrLastTS, t.StrLast = o.StrFirstTS, o.StrFirst, o.StrLastTS, o.StrLast
		} else {
			if o.StrFirstTS < t.StrFirstTS || o.StrFirstTS == t.StrFirstTS && o.StrFirst > t.StrFirst {
				t.StrFirstTS, t.StrFirst = o.StrFirstTS, o.StrFirst
			}
			if o.StrLastTS > t.StrLastTS || o.StrLastTS == t.StrLastTS && o.StrLast > t.StrLast {
				t.StrLastTS, t.StrLast = o.StrLastTS, o.StrLast
			}
		}
		t.StrCount += o.StrCount
	}
}

// FloatCount is the number of float values of the bucket.
func (b *Bucket) FloatCount() uint64 { return b.Count - b.typedCount() }

// Numeric is the number of numeric (float and int) values of the bucket:
// those that mean and max rank.
func (b *Bucket) Numeric() uint64 { return b.FloatCount() + b.IntCount }

// NumericMax is the largest float or int value (as a float64), or NaN if
// the bucket has neither.
func (b *Bucket) NumericMax() float64 {
	m := math.Inf(-1)
	if b.FloatCount() > 0 {
		m = b.Max
	}
	if b.IntCount > 0 {
		m = max(m, float64(b.IntMax))
	}
	if b.Numeric() == 0 {
		return math.NaN()
	}
	return m
}

// First returns the earliest value of the bucket of any type, and its
// time; ok is false for an empty bucket. Of values of different types at
// one time (only partial rows of different parts can hold them), a float
// comes first, then an int, a bool, a string.
func (b *Bucket) First() (m model.Metric, ts int64, ok bool) {
	pick := func(t int64, v model.Metric) {
		if !ok || t < ts {
			m, ts, ok = v, t, true
		}
	}
	if b.FloatCount() > 0 {
		pick(b.FirstTS, model.Metric{Value: b.FirstValue})
	}
	if b.IntCount > 0 {
		pick(b.IntFirstTS, model.IntMetric("", b.IntFirst))
	}
	if b.BoolCount > 0 {
		pick(b.BoolFirstTS, model.BoolMetric("", b.BoolFirst))
	}
	if b.StrCount > 0 {
		pick(b.StrFirstTS, model.StringMetric("", b.StrFirst))
	}
	return m, ts, ok
}

// Last returns the latest value of the bucket of any type, and its time;
// ok is false for an empty bucket. Of values of different types at one
// time, a string wins, then a bool, an int, a float.
func (b *Bucket) Last() (m model.Metric, ts int64, ok bool) {
	pick := func(t int64, v model.Metric) {
		if !ok || t >= ts {
			m, ts, ok = v, t, true
		}
	}
	if b.FloatCount() > 0 {
		pick(b.LastTS, model.Metric{Value: b.LastValue})
	}
	if b.IntCount > 0 {
		pick(b.IntLastTS, model.IntMetric("", b.IntLast))
	}
	if b.BoolCount > 0 {
		pick(b.BoolLastTS, model.BoolMetric("", b.BoolLast))
	}
	if b.StrCount > 0 {
		pick(b.StrLastTS, model.StringMetric("", b.StrLast))
	}
	return m, ts, ok
}

// AnyTyped reports whether a row of rows holds an int, bool or string
// aggregate.
func AnyTyped(rows []Row) bool {
	for i := range rows { // by index: a row is 320 bytes
		if rows[i].HasTyped() {
			return true
		}
	}
	return false
}

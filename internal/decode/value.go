package decode

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Bit sets of the id charset [A-Za-z0-9_.:-], for bytes 0-63 and 64-127.
const (
	idCharsLo uint64 = 1<<'-' | 1<<'.' | (1<<10-1)<<'0' | 1<<':'
	idCharsHi uint64 = (1<<26-1)<<('A'-64) | 1<<('_'-64) | (1<<26-1)<<('a'-64)
)

const idCharset = "[A-Za-z0-9_.:-]"

func isIDChar(c byte) bool {
	tbl := [4]uint64{idCharsLo, idCharsHi}
	return tbl[c>>6]>>(c&63)&1 != 0
}

// checkID returns why b is not a valid id, or "".
func checkID(b []byte, maxLen int) string {
	if len(b) == 0 {
		return "must not be empty"
	}
	if len(b) > maxLen {
		return fmt.Sprintf("is %d bytes long; at most %d allowed", len(b), maxLen)
	}
	for i, c := range b {
		if !isIDChar(c) {
			return fmt.Sprintf("invalid character %s at index %d (allowed: %s)", quoteByte(c), i, idCharset)
		}
	}
	return ""
}

// validIDChars reports whether every byte of b is in the id charset.
func validIDChars(b []byte) bool {
	tbl := [4]uint64{idCharsLo, idCharsHi}
	for _, c := range b {
		if tbl[c>>6]>>(c&63)&1 == 0 {
			return false
		}
	}
	return true
}

// checkText returns why b is not a valid text field, or "".
func checkText(b []byte, maxLen int) string {
	if len(b) > maxLen {
		return fmt.Sprintf("is %d bytes long; at most %d allowed", len(b), maxLen)
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return fmt.Sprintf("control character %s at index %d", quoteByte(c), i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("invalid UTF-8 at index %d", i)
		}
		if r >= 0x80 && r <= 0x9f {
			return fmt.Sprintf("control character %U at index %d", r, i)
		}
		i += n
	}
	return ""
}

// show quotes a value for an error message, cut to a readable length.
func show(b []byte) string {
	const max = 40
	if len(b) > max {
		return fmt.Sprintf("%q…", b[:max])
	}
	return fmt.Sprintf("%q", b)
}

// exactInt converts a JSON number literal to an int64 if its value is an
// integer (1.7e12 is; 1.5 and 1e-3 are not). It returns a reason on failure:
// errNotInteger or errInt64Range.
func exactInt(lit []byte) (int64, string) {
	i := 0
	neg := lit[0] == '-'
	if neg {
		i++
	}
	// Fast path: a plain integer of at most 18 digits.
	if len(lit)-i <= 18 {
		var v int64
		j := i
		for ; j < len(lit) && isDigit(lit[j]); j++ {
			v = v*10 + int64(lit[j]-'0')
		}
		if j == len(lit) {
			if neg {
				v = -v
			}
			return v, ""
		}
	}
	// General case: up to 20 significant digits, and the power of ten they
	// are multiplied by.
	var digits [20]byte
	nd, exp10 := 0, int64(0)
	lost := false // a non-zero digit did not fit in digits
	frac := false
	for ; i < len(lit); i++ {
		c := lit[i]
		if c == '.' {
			frac = true
			continue
		}
		if !isDigit(c) {
			break
		}
		if frac {
			exp10--
		}
		if c == '0' && nd == 0 {
			continue
		}
		if nd == len(digits) {
			lost = lost || c != '0'
			exp10++
			continue
		}
		digits[nd] = c
		nd++
	}
	if i < len(lit) { // exponent
		i++
		eneg := false
		if lit[i] == '+' || lit[i] == '-' {
			eneg = lit[i] == '-'
			i++
		}
		var e int64
		for ; i < len(lit); i++ {
			if e < 1e15 {
				e = e*10 + int64(lit[i]-'0')
			}
		}
		if eneg {
			e = -e
		}
		exp10 += e
	}
	if nd == 0 {
		return 0, ""
	}
	if int64(nd)+exp10 > 19 { // more than 19 integer digits
		return 0, errInt64Range
	}
	if lost {
		return 0, errNotInteger
	}
	for nd > 0 && digits[nd-1] == '0' {
		nd--
		exp10++
	}
	if exp10 < 0 {
		return 0, errNotInteger
	}
	var u uint64
	for _, c := range digits[:nd] {
		u = u*10 + uint64(c-'0')
	}
	for ; exp10 > 0; exp10-- {
		if u > math.MaxUint64/10 {
			return 0, errInt64Range
		}
		u *= 10
	}
	if neg {
		if u > 1<<63 {
			return 0, errInt64Range
		}
		return -int64(u), ""
	}
	if u > math.MaxInt64 {
		return 0, errInt64Range
	}
	return int64(u), ""
}

// Reasons returned by exactInt.
const (
	errNotInteger = "must be an integer"
	errInt64Range = "is out of int64 range"
)

// parseFloat converts a JSON number literal to a finite float64. Literals of
// at most 15 significant digits and no exponent take the exact fast path (an
// exact integer divided by an exact power of ten is correctly rounded);
// others go through strconv.
func parseFloat(lit []byte) (float64, string) {
	i := 0
	neg := lit[0] == '-'
	if neg {
		i++
	}
	var mant uint64
	n0 := i
	for ; i < len(lit) && isDigit(lit[i]); i++ {
		mant = mant*10 + uint64(lit[i]-'0')
	}
	nd, div := i-n0, uint64(1)
	if i < len(lit) && lit[i] == '.' {
		i++
		f0 := i
		for ; i < len(lit) && isDigit(lit[i]); i++ {
			mant = mant*10 + uint64(lit[i]-'0')
			div *= 10
		}
		nd += i - f0
	}
	if i == len(lit) && nd <= 15 {
		f := float64(mant) / float64(div)
		if neg {
			f = -f
		}
		return f, ""
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, "is out of float64 range"
	}
	return f, ""
}

// parseRFC3339 parses YYYY-MM-DDThh:mm:ss[.fraction](Z|±hh:mm) (T and Z in
// either case) into milliseconds since the epoch, truncating the fraction to
// milliseconds. It returns a reason on failure.
func parseRFC3339(b []byte) (int64, string) {
	if len(b) < len("2006-01-02T15:04:05Z") {
		return 0, "is too short"
	}
	num := func(at, n int) int {
		v := 0
		for _, c := range b[at : at+n] {
			if !isDigit(c) {
				return -1
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	if b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != 't') || b[13] != ':' || b[16] != ':' {
		return 0, "is not in the form YYYY-MM-DDThh:mm:ssZ"
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hour, minute, sec := num(11, 2), num(14, 2), num(17, 2)
	if year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || sec < 0 {
		return 0, "is not in the form YYYY-MM-DDThh:mm:ssZ"
	}
	switch {
	case month < 1 || month > 12:
		return 0, "has month out of range"
	case day < 1 || day > daysIn(month, year):
		return 0, "has day out of range"
	case hour > 23:
		return 0, "has hour out of range"
	case minute > 59:
		return 0, "has minute out of range"
	case sec > 59:
		return 0, "has second out of range"
	}
	i := 19
	ms := 0
	if b[i] == '.' {
		i++
		n := 0
		for ; i < len(b) && isDigit(b[i]); i++ {
			if n < 3 {
				ms = ms*10 + int(b[i]-'0')
			}
			n++
		}
		if n == 0 {
			return 0, "has an empty fraction of a second"
		}
		for ; n < 3; n++ {
			ms *= 10
		}
	}
	if i >= len(b) {
		return 0, "has no time zone offset"
	}
	offset := 0 // minutes east of UTC
	switch b[i] {
	case 'Z', 'z':
		i++
	case '+', '-':
		if len(b)-i != 6 || b[i+3] != ':' {
			return 0, "has a time zone offset not in the form ±hh:mm"
		}
		oh, om := num(i+1, 2), num(i+4, 2)
		if oh < 0 || om < 0 {
			return 0, "has a time zone offset not in the form ±hh:mm"
		}
		if oh > 23 || om > 59 {
			return 0, "has time zone offset out of range"
		}
		offset = oh*60 + om
		if b[i] == '-' {
			offset = -offset
		}
		i += 6
	default:
		return 0, "has no time zone offset"
	}
	if i != len(b) {
		return 0, "has trailing characters"
	}
	days := daysFromCivil(year, month, day)
	secs := days*86400 + int64(hour*3600+minute*60+sec) - int64(offset*60)
	return secs*1000 + int64(ms), ""
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(month, year int) int {
	switch month {
	case 2:
		if isLeap(year) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (H. Hinnant's algorithm), for years 0 to 9999.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// ts reads the timestamp at d.pos and checks it against the request's
// bounds.
func (d *decoder) ts() (int64, error) {
	const want = "must be RFC 3339 or integer epoch milliseconds"
	var ts int64
	switch c := d.peek(); {
	case c == '"':
		b, err := d.str()
		if err != nil {
			return 0, err
		}
		v, reason := parseRFC3339(b)
		if reason != "" {
			return 0, d.fail("ts", fmt.Sprintf("%s: %s %s", want, show(b), reason))
		}
		ts = v
	case c == '-' || isDigit(c):
		lit, err := d.number()
		if err != nil {
			return 0, err
		}
		v, reason := exactInt(lit)
		switch {
		case reason == errInt64Range:
			return 0, d.fail("ts", fmt.Sprintf("epoch milliseconds %s is after year 9999", lit))
		case reason != "":
			return 0, d.fail("ts", fmt.Sprintf("%s, got %s", want, show(lit)))
		case v < 0:
			return 0, d.fail("ts", fmt.Sprintf("epoch milliseconds must not be negative, got %s", lit))
		case v > maxEpochMillis:
			return 0, d.fail("ts", fmt.Sprintf("epoch milliseconds %s is after year 9999", lit))
		}
		ts = v
	default:
		return 0, d.wrongType("ts", want)
	}
	if reason := d.bounds.Check(ts); reason != "" {
		return 0, d.fail("ts", reason)
	}
	return ts, nil
}

// millisString formats a positive number of milliseconds as a duration.
func millisString(ms int64) string {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Sprintf("%dh", ms/int64(time.Hour/time.Millisecond))
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func fmtMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
)

// Value is a typed metric value in JSON, with its name left empty. The
// JSON says the type: true or false is a bool, a string a string, an
// integer literal (no fraction, no exponent) an int, and any other number
// a float. A float is therefore always written with a fraction or an
// exponent: 21.0, not 21.
type Value model.Metric

// MarshalJSON writes the value as described on Value.
func (v Value) MarshalJSON() ([]byte, error) {
	switch v.Type {
	case model.TypeInt:
		return strconv.AppendInt(nil, v.Int, 10), nil
	case model.TypeBool:
		return strconv.AppendBool(nil, v.Int != 0), nil
	case model.TypeString:
		return json.Marshal(v.Str)
	case model.TypeFloat:
		return AppendFloat(nil, v.Value)
	}
	return nil, fmt.Errorf("metric value of unknown type %s", v.Type)
}

// AppendFloat appends f as a JSON number that reads back as a float: the
// shortest form encoding/json would write, with ".0" added when that form
// has neither a fraction nor an exponent. NaN and infinities, which JSON
// cannot hold, are an error.
func AppendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("metric value %v is not a finite number", f)
	}
	n := len(b)
	js, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	b = append(b, js...)
	if !bytes.ContainsAny(b[n:], ".eE") {
		b = append(b, ".0"...)
	}
	return b, nil
}

// UnmarshalJSON reads a value written by MarshalJSON.
func (v *Value) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return fmt.Errorf("empty metric value")
	}
	switch data[0] {
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(data, &b); err != nil {
			return err
		}
		*v = Value(model.BoolMetric("", b))
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*v = Value(model.StringMetric("", s))
		return nil
	case 'n':
		return fmt.Errorf("metric value is null")
	}
	if !bytes.ContainsAny(data, ".eE") {
		i, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			return fmt.Errorf("metric value %s: not an int64", data)
		}
		*v = Value(model.IntMetric("", i))
		return nil
	}
	var f float64
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*v = Value(model.Metric{Value: f})
	return nil
}

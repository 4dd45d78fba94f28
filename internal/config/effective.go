package config

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/mqttingest"
)

// Redacted stands for a secret's value in Effective's output.
const Redacted = "<redacted>"

// isSecret reports whether a key (or a record field's name) holds a secret:
// bearer tokens and passwords. Key files and cursor key files are paths,
// not secrets, and are shown.
func isSecret(key string) bool {
	last := key[strings.LastIndexByte(key, '.')+1:]
	return last == "token" || last == "password" || strings.Contains(last, "secret")
}

// Effective renders c as YAML, every setting in the order of
// configs/ingest.yaml, secrets replaced by <redacted> (an empty secret
// stays ""), each line ending in a comment that says where its value came
// from: default, file, env SLUICE_... or flag --....
func Effective(c Config, l Loaded) string {
	var b strings.Builder
	src := "built-in defaults"
	if l.File != "" {
		src = l.File
	}
	fmt.Fprintf(&b, "# Effective configuration (file: %s); precedence: flag > env > file > default.\n", src)
	e := emitter{b: &b, origin: l.Origin}
	e.structFields(reflect.ValueOf(c), "", 0)
	return b.String()
}

type emitter struct {
	b      *strings.Builder
	origin map[string]string
}

func (e emitter) comment(key string) string {
	if o, ok := e.origin[key]; ok {
		return "  # " + o
	}
	return "  # default"
}

func (e emitter) indent(n int) string { return strings.Repeat("  ", n) }

func tag(f reflect.StructField) string {
	t, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
	return t
}

// structFields writes the fields of the struct v, keys prefixed by prefix.
func (e emitter) structFields(v reflect.Value, prefix string, depth int) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		name := tag(f)
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			if strings.Contains(f.Tag.Get("mapstructure"), "squash") && f.Type.Kind() == reflect.Struct {
				e.structFields(v.Field(i), prefix, depth)
			}
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		e.value(v.Field(i), name, key, depth)
	}
}

// value writes one setting "name: value" (or a nested block).
func (e emitter) value(v reflect.Value, name, key string, depth int) {
	ind := e.indent(depth)
	if s, ok := scalar(v, key); ok {
		fmt.Fprintf(e.b, "%s%s: %s%s\n", ind, name, s, e.comment(key))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		fmt.Fprintf(e.b, "%s%s:\n", ind, name)
		e.structFields(v, key, depth+1)
	case reflect.Slice:
		if v.Len() == 0 {
			fmt.Fprintf(e.b, "%s%s: []%s\n", ind, name, e.comment(key))
			return
		}
		fmt.Fprintf(e.b, "%s%s:%s\n", ind, name, e.comment(key))
		for i := 0; i < v.Len(); i++ {
			e.item(v.Index(i), key, depth+1)
		}
	case reflect.Map:
		if v.Len() == 0 {
			fmt.Fprintf(e.b, "%s%s: {}%s\n", ind, name, e.comment(key))
			return
		}
		fmt.Fprintf(e.b, "%s%s:%s\n", ind, name, e.comment(key))
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(e.b, "%s%s:\n", e.indent(depth+1), k)
			e.record(v.MapIndex(reflect.ValueOf(k)), key, depth+2, "")
		}
	default:
		fmt.Fprintf(e.b, "%s%s: %q%s\n", ind, name, fmt.Sprint(v.Interface()), e.comment(key))
	}
}

// item writes one list entry.
func (e emitter) item(v reflect.Value, key string, depth int) {
	if t, ok := v.Interface().(mqttingest.Topic); ok {
		fmt.Fprintf(e.b, "%s- filter: %s\n%s  qos: %d\n%s  payload_format: %s\n", e.indent(depth), strconv.Quote(t.Filter),
			e.indent(depth), t.QoS, e.indent(depth), strconv.Quote(t.PayloadFormat))
		return
	}
	if s, ok := scalar(v, key); ok {
		fmt.Fprintf(e.b, "%s- %s\n", e.indent(depth), s)
		return
	}
	e.record(v, key, depth, "- ")
}

// record writes the fields of a list entry or map value; zero fields of a
// map value (inherited settings) are left out.
func (e emitter) record(v reflect.Value, key string, depth int, first string) {
	lead := first
	wrote := false
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		name := tag(f)
		if name == "" || name == "-" || !f.IsExported() || (first == "" && v.Field(i).IsZero()) {
			continue
		}
		s, ok := scalar(v.Field(i), key+"."+name)
		if !ok {
			s = strconv.Quote(fmt.Sprint(v.Field(i).Interface()))
		}
		pad := e.indent(depth)
		if lead == "" && first != "" {
			pad += "  "
		}
		fmt.Fprintf(e.b, "%s%s%s: %s\n", pad, lead, name, s)
		lead = ""
		wrote = true
	}
	if !wrote && first != "" {
		fmt.Fprintf(e.b, "%s- {}\n", e.indent(depth))
	}
}

// scalar renders a leaf value as YAML; secrets are redacted.
func scalar(v reflect.Value, key string) (string, bool) {
	if isSecret(key) && v.Kind() == reflect.String {
		if v.String() == "" {
			return `""`, true
		}
		return strconv.Quote(Redacted), true
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String(), true
	case encoding.TextMarshaler:
		if v.Kind() != reflect.Struct {
			t, err := x.MarshalText()
			if err == nil {
				return strconv.Quote(string(t)), true
			}
		}
	}
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String()), true
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10), true
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), true
	}
	return "", false
}

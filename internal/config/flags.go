package config

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/mqttingest"
)

// Flags holds one command-line flag per setting, named after its key:
// --http.addr, --store.backend, --buckets.max_rows and so on. Register them
// with AddFlags, parse the flag set, and pass them to LoadSources; a flag
// given on the command line overrides the environment and the file.
type Flags struct {
	vals map[string]*flagValue
}

// flagValue is one setting's flag. The text is parsed by LoadSources, as
// the environment's is, so that an error names the key and what is allowed.
type flagValue struct {
	typ string
	val string
	set bool
}

func (f *flagValue) String() string { return f.val }
func (f *flagValue) Type() string   { return f.typ }
func (f *flagValue) Set(s string) error {
	f.val, f.set = s, true
	return nil
}

// fileOnly are the settings that only a file can hold: lists of records
// without a one-line form, and maps.
var fileOnly = []string{"mqtt.embedded.users", "retention.tenants"}

// AddFlags registers a flag for every setting (but the file-only ones,
// mqtt.embedded.users and retention.tenants) on fs.
func AddFlags(fs *pflag.FlagSet) *Flags {
	var flat map[string]any
	// Unresolved: the settings the memory budget sizes show their 0.
	_ = mapstructure.Decode(unresolved(), &flat)
	known := flatten("", flat)
	keys := slices.DeleteFunc(knownKeys(), func(k string) bool { return slices.Contains(fileOnly, k) })
	f := &Flags{vals: make(map[string]*flagValue, len(keys))}
	for _, k := range keys {
		typ, hint := flagType(k, known[k])
		fv := &flagValue{typ: typ, val: flagDefault(k, known[k])}
		f.vals[k] = fv
		env := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))
		usage := "setting " + k + " (also " + env + ")"
		if hint != "" {
			usage += "; " + hint
		}
		flag := fs.VarPF(fv, k, "", usage)
		if k == pastRollDelayKey {
			// Its default depends on the store: said in the usage, not
			// shown as one value.
			flag.Usage += "; unset: " + EmbeddedPastRollDelay.String() + " on the embedded store, " + known[k].(time.Duration).String() + " on Cassandra"
			flag.DefValue = ""
		}
		if typ == "bool" {
			flag.NoOptDefVal = "true"
		}
	}
	return f
}

// changed returns the keys of the flags given on the command line.
func (f *Flags) changed() []string {
	var out []string
	for k, v := range f.vals {
		if v.set {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// flagType names a setting's flag type for the usage text, with a hint of
// the form of its value.
func flagType(key string, cur any) (typ, hint string) {
	switch cur.(type) {
	case bool:
		return "bool", ""
	case int, int64:
		return "int", ""
	case time.Duration:
		return "duration", "e.g. 500ms, 30s, 5m"
	case []Token:
		return "tokens", "token=tenant,... (the tokens are secrets: prefer the file or the environment, which other users of the machine cannot list)"
	}
	if _, ok := cur.(encoding.TextMarshaler); ok {
		return "duration", "e.g. 30d, 2w, 36h"
	}
	if reflect.TypeOf(cur).Kind() == reflect.Slice {
		if key == "mqtt.topics" {
			return "list", "comma-separated filter:qos[:json|influx|auto]"
		}
		return "list", "comma-separated"
	}
	if isSecret(key) {
		return "string", "a secret: prefer the file or the environment, which other users of the machine cannot list"
	}
	return "string", ""
}

// flagDefault is the default as the usage text shows it; secrets are not
// shown.
func flagDefault(key string, cur any) string {
	if isSecret(key) {
		return ""
	}
	switch v := cur.(type) {
	case []Token:
		return ""
	case []string:
		return strings.Join(v, ",")
	case []mqttingest.Topic:
		parts := make([]string, len(v))
		for i, t := range v {
			parts[i] = fmt.Sprintf("%s:%d", t.Filter, t.QoS)
			if t.PayloadFormat != "" && t.PayloadFormat != mqttingest.FormatJSON {
				parts[i] += ":" + t.PayloadFormat
			}
		}
		return strings.Join(parts, ",")
	case encoding.TextMarshaler:
		b, _ := v.MarshalText()
		return string(b)
	}
	if rv := reflect.ValueOf(cur); rv.Kind() == reflect.Slice {
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(rv.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(cur)
}

// knownKeys returns every setting's key, sorted.
func knownKeys() []string {
	var flat map[string]any
	_ = mapstructure.Decode(Default(), &flat)
	keys := make([]string, 0, 128)
	for k := range flatten("", flat) {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

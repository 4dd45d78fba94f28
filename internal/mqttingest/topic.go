package mqttingest

import (
	"errors"
	"fmt"
	"strings"
)

// Template is a parsed mqtt.topic_template such as
// "tenants/{tenant}/devices/{device_id}/readings": topic levels that are
// either literal or one whole placeholder. {device_id} must appear once,
// {tenant} at most once.
type Template struct {
	src    string
	levels []string // literal text, or "" for a placeholder
	device int      // level of {device_id}
	tenant int      // level of {tenant}, -1 if none
}

// Placeholders a template may use.
const (
	phDevice = "{device_id}"
	phTenant = "{tenant}"
)

// ParseTemplate parses a topic template.
func ParseTemplate(s string) (*Template, error) {
	if s == "" {
		return nil, errors.New("is empty")
	}
	t := &Template{src: s, device: -1, tenant: -1}
	for i, lvl := range strings.Split(s, "/") {
		switch {
		case lvl == phDevice:
			if t.device >= 0 {
				return nil, fmt.Errorf("%q has %s twice", s, phDevice)
			}
			t.device = i
			lvl = ""
		case lvl == phTenant:
			if t.tenant >= 0 {
				return nil, fmt.Errorf("%q has %s twice", s, phTenant)
			}
			t.tenant = i
			lvl = ""
		case strings.ContainsAny(lvl, "{}"):
			return nil, fmt.Errorf("%q: level %d (%q) must be a literal or exactly one of %s, %s", s, i, lvl, phDevice, phTenant)
		case strings.ContainsAny(lvl, "+#\x00"):
			return nil, fmt.Errorf("%q: level %d (%q) must not hold a wildcard (+ #) or NUL", s, i, lvl)
		}
		t.levels = append(t.levels, lvl)
	}
	if t.device < 0 {
		return nil, fmt.Errorf("%q has no %s level", s, phDevice)
	}
	if strings.HasPrefix(s, "$") {
		return nil, fmt.Errorf("%q: topics starting with $ are reserved by brokers", s)
	}
	return t, nil
}

// HasTenant reports whether the template carries {tenant}.
func (t *Template) HasTenant() bool { return t.tenant >= 0 }

// Filter returns the subscription filter that matches every topic of the
// template (placeholders become +).
func (t *Template) Filter() string {
	parts := make([]string, len(t.levels))
	for i, l := range t.levels {
		if l == "" {
			l = "+"
		}
		parts[i] = l
	}
	return strings.Join(parts, "/")
}

// Match extracts the tenant (empty when the template has none) and the
// device from a topic. It fails when the topic does not have the
// template's shape or a placeholder level is empty; it does not check the
// characters of the values (the decoder and the tenant check do).
func (t *Template) Match(topic string) (tenant, device string, err error) {
	rest := topic
	for i, lit := range t.levels {
		var lvl string
		last := i == len(t.levels)-1
		if last {
			if strings.IndexByte(rest, '/') >= 0 {
				return "", "", fmt.Errorf("topic %q has more levels than the template %q", topic, t.src)
			}
			lvl = rest
		} else {
			j := strings.IndexByte(rest, '/')
			if j < 0 {
				return "", "", fmt.Errorf("topic %q has fewer levels than the template %q", topic, t.src)
			}
			lvl, rest = rest[:j], rest[j+1:]
		}
		switch i {
		case t.device:
			if lvl == "" {
				return "", "", fmt.Errorf("topic %q: the device_id level is empty", topic)
			}
			device = lvl
		case t.tenant:
			if lvl == "" {
				return "", "", fmt.Errorf("topic %q: the tenant level is empty", topic)
			}
			tenant = lvl
		default:
			if lvl != lit {
				return "", "", fmt.Errorf("topic %q: level %d is %q, the template %q wants %q", topic, i, lvl, t.src, lit)
			}
		}
	}
	return tenant, device, nil
}

// Render returns the topic of a device (and tenant).
func (t *Template) Render(tenant, device string) string {
	parts := make([]string, len(t.levels))
	for i, l := range t.levels {
		switch i {
		case t.device:
			l = device
		case t.tenant:
			l = tenant
		}
		parts[i] = l
	}
	return strings.Join(parts, "/")
}

package algo

import (
	"encoding/json"
	"fmt"
	"time"
)

// Spec is the serialized form of a limit, as it appears in replay events
// ({"algorithm": "gcra", "burst": 15, "count": 30, "period": "60s"}) and in
// limits.yaml. Fields that the algorithm does not use must be left out.
type Spec struct {
	Algorithm string `json:"algorithm" yaml:"algorithm"`
	// gcra
	Burst  int64    `json:"burst,omitempty" yaml:"burst,omitempty"`
	Count  int64    `json:"count,omitempty" yaml:"count,omitempty"`
	Period Duration `json:"period,omitempty" yaml:"period,omitempty"`
	// token_bucket (also Burst)
	Rate int64    `json:"rate,omitempty" yaml:"rate,omitempty"`
	Per  Duration `json:"per,omitempty" yaml:"per,omitempty"`
	// fixed_window
	Limit  int64    `json:"limit,omitempty" yaml:"limit,omitempty"`
	Window Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// gate
	Interval Duration `json:"interval,omitempty" yaml:"interval,omitempty"`
}

// Algorithm names, as used in Spec.Algorithm.
const (
	NameGCRA        = "gcra"
	NameTokenBucket = "token_bucket"
	NameFixedWindow = "fixed_window"
	NameGate        = "gate"
)

// Build builds and validates the limit the spec describes.
func (s Spec) Build() (Limit, error) {
	var l Limit
	var used []string // the fields the algorithm reads
	switch s.Algorithm {
	case NameGCRA:
		l, used = GCRA{Burst: s.Burst, Count: s.Count, Period: time.Duration(s.Period)}, []string{"burst", "count", "period"}
	case NameTokenBucket:
		l, used = TokenBucket{Burst: s.Burst, Rate: s.Rate, Per: time.Duration(s.Per)}, []string{"burst", "rate", "per"}
	case NameFixedWindow:
		l, used = FixedWindow{Limit: s.Limit, Window: time.Duration(s.Window)}, []string{"limit", "window"}
	case NameGate:
		l, used = Gate{Interval: time.Duration(s.Interval)}, []string{"interval"}
	case "":
		return nil, fmt.Errorf("%w: no algorithm (want gcra, token_bucket, fixed_window or gate)", ErrInvalid)
	default:
		return nil, fmt.Errorf("%w: unknown algorithm %q (want gcra, token_bucket, fixed_window or gate)", ErrInvalid, s.Algorithm)
	}
	if f := s.extra(used); f != "" {
		return nil, fmt.Errorf("%w: %s does not take %q", ErrInvalid, s.Algorithm, f)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// extra returns the first set field that is not in used.
func (s Spec) extra(used []string) string {
	set := []struct {
		name string
		on   bool
	}{
		{"burst", s.Burst != 0}, {"count", s.Count != 0}, {"period", s.Period != 0},
		{"rate", s.Rate != 0}, {"per", s.Per != 0},
		{"limit", s.Limit != 0}, {"window", s.Window != 0}, {"interval", s.Interval != 0},
	}
next:
	for _, f := range set {
		if !f.on {
			continue
		}
		for _, u := range used {
			if u == f.name {
				continue next
			}
		}
		return f.name
	}
	return ""
}

// Duration is a time.Duration written as a Go duration string ("60s",
// "1h30m") in JSON and YAML.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON accepts only a duration string, so that a bare number
// (whose unit would be a guess) is an error.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: duration must be a string such as \"60s\", got %s", ErrInvalid, b)
	}
	return d.UnmarshalText([]byte(s))
}

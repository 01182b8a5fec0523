package algo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"
)

// Spec is the serialized form of a limit, as it appears in replay events
// ({"algorithm": "gcra", "burst": 15, "count": 30, "period": "60s"}) and in
// limits.yaml. Fields that the algorithm does not use must be left out.
type Spec struct {
	Algorithm string `json:"algorithm" yaml:"algorithm"`
	// gcra
	Burst  int64         `json:"burst,omitempty" yaml:"burst,omitempty"`
	Count  int64         `json:"count,omitempty" yaml:"count,omitempty"`
	Period time.Duration `json:"period,omitempty" yaml:"period,omitempty"`
	// token_bucket (also Burst)
	Rate int64         `json:"rate,omitempty" yaml:"rate,omitempty"`
	Per  time.Duration `json:"per,omitempty" yaml:"per,omitempty"`
	// fixed_window
	Limit  int64         `json:"limit,omitempty" yaml:"limit,omitempty"`
	Window time.Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// Calendar is the window when it is the calendar's: day, week, month
	// or year, written as the window ("window": "month"); with its
	// TimeZone, AnchorDay (a month's) and WeekStart (a week's).
	Calendar  string `json:"-" yaml:"-"`
	TimeZone  string `json:"time_zone,omitempty" yaml:"time_zone,omitempty"`
	AnchorDay int64  `json:"anchor_day,omitempty" yaml:"anchor_day,omitempty"`
	WeekStart string `json:"week_start,omitempty" yaml:"week_start,omitempty"`
	// gate
	Interval time.Duration `json:"interval,omitempty" yaml:"interval,omitempty"`
	// concurrency (also Limit)
	HoldFor time.Duration `json:"hold_for,omitempty" yaml:"hold_for,omitempty"`
	// sliding_log and window_counter: a list of {limit, window} (each may
	// have a name), or a mapping from names to {limit, window}, ordered by
	// window then name.
	Limits WindowSpecs `json:"limits,omitempty" yaml:"limits,omitempty"`
	// sliding_log
	MinGap  time.Duration `json:"min_gap,omitempty" yaml:"min_gap,omitempty"`
	Buckets *int64        `json:"buckets,omitempty" yaml:"buckets,omitempty"` // nil: exact log
	Mode    string        `json:"mode,omitempty" yaml:"mode,omitempty"`       // binary (default), nary or uniform
	// window_counter
	Slice time.Duration `json:"slice,omitempty" yaml:"slice,omitempty"` // 0: 1s
	// any algorithm: block the keys that go over (Blocking)
	Block *Block `json:"block,omitempty" yaml:"block,omitempty"`
	// gcra, token_bucket, fixed_window, window_counter and a binary
	// sliding_log: record a denied charge in full (Debt)
	Debt bool `json:"debt,omitempty" yaml:"debt,omitempty"`
}

// WindowSpec is one limit of a sliding_log or window_counter spec.
type WindowSpec struct {
	Name   string        `json:"name,omitempty" yaml:"name,omitempty"`
	Limit  int64         `json:"limit" yaml:"limit"`
	Window time.Duration `json:"window" yaml:"window"`
}

// WindowSpecs is the limits of a sliding_log or window_counter spec. It
// reads a list of WindowSpec, or a mapping from names to WindowSpec, which
// it orders by window and then by name.
type WindowSpecs []WindowSpec

// UnmarshalJSON implements json.Unmarshaler.
func (ws *WindowSpecs) UnmarshalJSON(b []byte) error {
	return ws.unmarshal(func(v any) error {
		return strictJSON(b, v)
	}, bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")))
}

// UnmarshalYAML implements the yaml.v2/v3 unmarshaler that needs no import
// of a YAML package.
func (ws *WindowSpecs) UnmarshalYAML(unmarshal func(any) error) error {
	var m map[string]WindowSpec
	if unmarshal(&m) == nil && m != nil {
		return ws.fromMap(m)
	}
	var l []WindowSpec
	if err := unmarshal(&l); err != nil {
		return fmt.Errorf("%w: limits must be a list of {limit, window} or a mapping of names to them: %v", ErrInvalid, err)
	}
	*ws = l
	return nil
}

func (ws *WindowSpecs) unmarshal(decode func(any) error, isMap bool) error {
	if isMap {
		var m map[string]WindowSpec
		if err := decode(&m); err != nil {
			return fmt.Errorf("%w: limits: %v", ErrInvalid, err)
		}
		return ws.fromMap(m)
	}
	var l []WindowSpec
	if err := decode(&l); err != nil {
		return fmt.Errorf("%w: limits must be a list of {limit, window} or an object of names to them: %v", ErrInvalid, err)
	}
	*ws = l
	return nil
}

func (ws *WindowSpecs) fromMap(m map[string]WindowSpec) error {
	l := make([]WindowSpec, 0, len(m))
	for name, w := range m {
		if w.Name != "" && w.Name != name {
			return fmt.Errorf("%w: limit %q has another name %q", ErrInvalid, name, w.Name)
		}
		w.Name = name
		l = append(l, w)
	}
	sort.Slice(l, func(i, j int) bool {
		if l[i].Window != l[j].Window {
			return l[i].Window < l[j].Window
		}
		return l[i].Name < l[j].Name
	})
	*ws = l
	return nil
}

func (ws WindowSpecs) windows() []Window {
	out := make([]Window, len(ws))
	for i, w := range ws {
		out[i] = Window{Name: w.Name, Count: w.Limit, Window: w.Window}
	}
	return out
}

// sameMeaning names, by "algorithm field", the field an algorithm takes
// for one that another algorithm's spec has with the same meaning: gcra's
// count per period is token_bucket's rate per per.
var sameMeaning = map[string]string{
	"token_bucket period":   `"per"`,
	"token_bucket count":    `"rate"`,
	"gcra per":              `"period"`,
	"gcra rate":             `"count"`,
	"fixed_window limits":   `"limit" and "window"`,
	"sliding_log limit":     `"limits" (a list of {limit, window})`,
	"sliding_log window":    `"limits" (a list of {limit, window})`,
	"window_counter limit":  `"limits" (a list of {limit, window})`,
	"window_counter window": `"limits" (a list of {limit, window})`,
	"gate window":           `"interval"`,
}

// Build builds and validates the limit the spec describes.
func (s Spec) Build() (Limit, error) {
	k, err := parseKind(s.Algorithm)
	if err != nil {
		return nil, err
	}
	if f := s.extra(kinds[k].fields); f != "" {
		if w, ok := sameMeaning[s.Algorithm+" "+f]; ok {
			return nil, fmt.Errorf("%w: %s does not take %q: it says %s", ErrInvalid, s.Algorithm, f, w)
		}
		return nil, fmt.Errorf("%w: %s does not take %q", ErrInvalid, s.Algorithm, f)
	}
	l, err := kinds[k].build(s)
	if err != nil {
		return nil, err
	}
	if s.Block != nil {
		l = Blocking{Limit: l, Block: *s.Block}
	}
	if s.Debt {
		l = Debt{Limit: l}
	}
	if err := l.validate(); err != nil {
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
		{"hold_for", s.HoldFor != 0},
		{"limits", s.Limits != nil}, {"min_gap", s.MinGap != 0}, {"buckets", s.Buckets != nil},
		{"mode", s.Mode != ""}, {"slice", s.Slice != 0},
		{"window", s.Calendar != ""}, {"time_zone", s.TimeZone != ""}, {"anchor_day", s.AnchorDay != 0}, {"week_start", s.WeekStart != ""},
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

// MarshalJSON implements json.Marshaler: AppendJSON.
func (s Spec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil), nil }

// UnmarshalJSON implements json.Unmarshaler. It refuses fields the Spec
// does not have, and takes a duration only as a Go duration string
// ("60s", "1h30m"): a bare number, whose unit would be a guess, is an
// error.
func (s *Spec) UnmarshalJSON(b []byte) error {
	var j struct {
		Algorithm string       `json:"algorithm"`
		Burst     int64        `json:"burst"`
		Count     int64        `json:"count"`
		Period    jsonDuration `json:"period"`
		Rate      int64        `json:"rate"`
		Per       jsonDuration `json:"per"`
		Limit     int64        `json:"limit"`
		Window    jsonWindow   `json:"window"`
		TimeZone  string       `json:"time_zone"`
		AnchorDay int64        `json:"anchor_day"`
		WeekStart string       `json:"week_start"`
		Interval  jsonDuration `json:"interval"`
		HoldFor   jsonDuration `json:"hold_for"`
		Limits    WindowSpecs  `json:"limits"`
		MinGap    jsonDuration `json:"min_gap"`
		Buckets   *int64       `json:"buckets"`
		Mode      string       `json:"mode"`
		Slice     jsonDuration `json:"slice"`
		Block     *Block       `json:"block"`
		Debt      bool         `json:"debt"`
	}
	if err := strictJSON(b, &j); err != nil {
		return err
	}
	*s = Spec{Algorithm: j.Algorithm, Burst: j.Burst, Count: j.Count, Period: time.Duration(j.Period),
		Rate: j.Rate, Per: time.Duration(j.Per), Limit: j.Limit, Window: j.Window.d, Calendar: j.Window.calendar,
		TimeZone: j.TimeZone, AnchorDay: j.AnchorDay, WeekStart: j.WeekStart,
		Interval: time.Duration(j.Interval), HoldFor: time.Duration(j.HoldFor), Limits: j.Limits, MinGap: time.Duration(j.MinGap),
		Buckets: j.Buckets, Mode: j.Mode, Slice: time.Duration(j.Slice), Block: j.Block, Debt: j.Debt}
	return nil
}

// MarshalJSON implements json.Marshaler, with the window as a Go duration
// string.
func (w WindowSpec) MarshalJSON() ([]byte, error) { return w.appendJSON(nil), nil }

// UnmarshalJSON implements json.Unmarshaler, as Spec's does.
func (w *WindowSpec) UnmarshalJSON(b []byte) error {
	var j struct {
		Name   string       `json:"name"`
		Limit  int64        `json:"limit"`
		Window jsonDuration `json:"window"`
	}
	if err := strictJSON(b, &j); err != nil {
		return err
	}
	*w = WindowSpec{Name: j.Name, Limit: j.Limit, Window: time.Duration(j.Window)}
	return nil
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// jsonWindow is a spec's window in JSON: a Go duration string, or a
// calendar unit ("month").
type jsonWindow struct {
	d        time.Duration
	calendar string
}

func (w *jsonWindow) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil && IsCalendarUnit(s) {
		w.calendar = s
		return nil
	}
	var d jsonDuration
	if err := d.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("window must be a duration such as \"60s\", or day, week, month or year: %w", err)
	}
	w.d = time.Duration(d)
	return nil
}

// jsonDuration is a duration in a spec's JSON: a Go duration string.
type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"60s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = jsonDuration(v)
	return nil
}

// AppendJSON appends the spec as JSON to b, byte for byte what
// encoding/json writes for it (fields left out when empty, durations as Go
// duration strings), without reflection.
func (s *Spec) AppendJSON(b []byte) []byte {
	num := func(b []byte, name string, v int64) []byte {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		return strconv.AppendInt(b, v, 10)
	}
	dur := func(b []byte, name string, v time.Duration) []byte {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":"`...)
		b = append(b, v.String()...)
		return append(b, '"')
	}
	b = append(b, `{"algorithm":`...)
	b = appendString(b, s.Algorithm)
	for _, f := range [...]struct {
		name string
		v    int64
		dur  bool
	}{
		{"burst", s.Burst, false}, {"count", s.Count, false}, {"period", int64(s.Period), true},
		{"rate", s.Rate, false}, {"per", int64(s.Per), true},
		{"limit", s.Limit, false}, {"window", int64(s.Window), true},
		{"interval", int64(s.Interval), true}, {"hold_for", int64(s.HoldFor), true},
	} {
		switch {
		case f.v == 0:
		case f.dur:
			b = dur(b, f.name, time.Duration(f.v))
		default:
			b = num(b, f.name, f.v)
		}
	}
	if s.Limits != nil {
		b = append(b, `,"limits":[`...)
		for i, w := range s.Limits {
			if i > 0 {
				b = append(b, ',')
			}
			b = w.appendJSON(b)
		}
		b = append(b, ']')
	}
	if s.MinGap != 0 {
		b = dur(b, "min_gap", s.MinGap)
	}
	if s.Buckets != nil {
		b = num(b, "buckets", *s.Buckets)
	}
	if s.Mode != "" {
		b = append(b, `,"mode":`...)
		b = appendString(b, s.Mode)
	}
	if s.Slice != 0 {
		b = dur(b, "slice", s.Slice)
	}
	if s.Calendar != "" {
		b = append(b, `,"window":`...)
		b = appendString(b, s.Calendar)
	}
	if s.TimeZone != "" {
		b = append(b, `,"time_zone":`...)
		b = appendString(b, s.TimeZone)
	}
	if s.AnchorDay != 0 {
		b = num(b, "anchor_day", s.AnchorDay)
	}
	if s.WeekStart != "" {
		b = append(b, `,"week_start":`...)
		b = appendString(b, s.WeekStart)
	}
	if s.Block != nil {
		b = append(b, `,"block":`...)
		b = s.Block.appendJSON(b)
	}
	if s.Debt {
		b = append(b, `,"debt":true`...)
	}
	return append(b, '}')
}

// appendString appends s as encoding/json writes a string: as it is when
// printable ASCII that needs no escape (a spec's strings always are, once
// valid), else through encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// blockJSON is a Block's JSON, durations as Go duration strings.
type blockJSON struct {
	For         jsonDuration `json:"for"`
	Growth      *float64     `json:"growth,omitempty"`
	Max         jsonDuration `json:"max,omitempty"`
	ForgetAfter jsonDuration `json:"forget_after,omitempty"`
}

// UnmarshalJSON implements json.Unmarshaler, as Spec's does.
func (b *Block) UnmarshalJSON(data []byte) error {
	var j blockJSON
	if err := strictJSON(data, &j); err != nil {
		return err
	}
	*b = Block{For: time.Duration(j.For), Max: time.Duration(j.Max), ForgetAfter: time.Duration(j.ForgetAfter)}
	if j.Growth != nil {
		if *j.Growth == 0 { // would read as no block after the first
			return fmt.Errorf("%w: block growth must be 1 to %d, got 0 (leave it out for 1)", ErrInvalid, MaxGrowth)
		}
		b.Growth = *j.Growth
	}
	return nil
}

// MarshalJSON implements json.Marshaler: appendJSON.
func (b Block) MarshalJSON() ([]byte, error) { return b.appendJSON(nil), nil }

// appendJSON appends the block as JSON, fields left out when zero (but
// for), as encoding/json writes it.
func (b Block) appendJSON(out []byte) []byte {
	out = append(out, `{"for":"`...)
	out = append(out, b.For.String()...)
	out = append(out, '"')
	if b.Growth != 0 {
		out = append(out, `,"growth":`...)
		out = strconv.AppendFloat(out, b.Growth, 'g', -1, 64)
	}
	if b.Max != 0 {
		out = append(out, `,"max":"`...)
		out = append(out, b.Max.String()...)
		out = append(out, '"')
	}
	if b.ForgetAfter != 0 {
		out = append(out, `,"forget_after":"`...)
		out = append(out, b.ForgetAfter.String()...)
		out = append(out, '"')
	}
	return append(out, '}')
}

// appendJSON appends the window as JSON to b, as Spec.AppendJSON does.
func (w WindowSpec) appendJSON(b []byte) []byte {
	b = append(b, '{')
	if w.Name != "" {
		b = append(b, `"name":`...)
		b = appendString(b, w.Name)
		b = append(b, ',')
	}
	b = append(b, `"limit":`...)
	b = strconv.AppendInt(b, w.Limit, 10)
	b = append(b, `,"window":"`...)
	b = append(b, w.Window.String()...)
	return append(b, `"}`...)
}

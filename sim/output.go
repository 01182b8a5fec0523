package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Chart sizes: the PNG is ChartWidth × ChartHeight pixels.
const (
	ChartWidth  = 1200
	ChartHeight = 500
	chartDPI    = 96
)

// WriteCSV writes the series: t_ms,strategy,offered,admitted, one row per
// slice per strategy, slices in time order, strategies in run order.
func WriteCSV(w io.Writer, r *Result) error {
	var b bytes.Buffer
	b.WriteString("t_ms,strategy,offered,admitted\n")
	for i := 0; i < r.Slices; i++ {
		t := strconv.FormatInt((r.Slice * time.Duration(i)).Milliseconds(), 10)
		for _, s := range r.Strategies {
			b.WriteString(t)
			b.WriteByte(',')
			b.WriteString(csvField(s.Name))
			fmt.Fprintf(&b, ",%d,%d\n", s.Offered[i], s.Admitted[i])
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// csvField quotes a field that holds a comma, a quote or a line break.
func csvField(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ',' || c == '"' || c == '\n' || c == '\r' {
			return strconv.Quote(s)
		}
	}
	return s
}

// SummaryJSON is summary.json.
type SummaryJSON struct {
	Scenario   string            `json:"scenario"`
	Seed       uint64            `json:"seed"`
	DurationMs int64             `json:"duration_ms"`
	Rate       float64           `json:"rate,omitempty"`
	Callers    int               `json:"callers,omitempty"`
	Events     int               `json:"events"`
	SliceMs    int64             `json:"slice_ms"`
	Strategies []StrategySummary `json:"strategies"`
}

// StrategySummary is one strategy in summary.json.
type StrategySummary struct {
	Name string `json:"name"`
	Summary
}

// NewSummary gathers a result's summary.
func NewSummary(r *Result) SummaryJSON {
	out := SummaryJSON{
		Scenario: r.Scenario, Seed: r.Seed, DurationMs: r.Params.Duration.Milliseconds(),
		Rate: r.Params.Rate, Callers: r.Params.Callers, Events: r.Events, SliceMs: r.Slice.Milliseconds(),
	}
	for _, s := range r.Strategies {
		out.Strategies = append(out.Strategies, StrategySummary{Name: s.Name, Summary: s.Summary})
	}
	return out
}

// palette holds a line colour per strategy.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// Chart draws admitted per slice, a line per strategy, over the offered
// requests as a grey band.
func Chart(r *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: admitted per %v, by strategy (grey: offered)", r.Scenario, r.Slice)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "requests per slice"
	p.Legend.Top = true
	if len(r.Strategies) == 0 {
		return p, nil
	}
	secs := r.Slice.Seconds()
	offered := r.Strategies[0].Offered
	band := make(plotter.XYs, 0, 2*len(offered)+2)
	band = append(band, plotter.XY{X: 0, Y: 0})
	for i, v := range offered {
		band = append(band, plotter.XY{X: float64(i) * secs, Y: float64(v)}, plotter.XY{X: float64(i+1) * secs, Y: float64(v)})
	}
	band = append(band, plotter.XY{X: float64(len(offered)) * secs, Y: 0})
	poly, err := plotter.NewPolygon(band)
	if err != nil {
		return nil, err
	}
	poly.Color = color.RGBA{R: 0xdd, G: 0xdd, B: 0xdd, A: 0xff}
	poly.LineStyle.Width = 0
	p.Add(poly)
	p.Legend.Add("offered", poly)
	for i, s := range r.Strategies {
		pts := make(plotter.XYs, len(s.Admitted))
		for j, v := range s.Admitted {
			pts[j] = plotter.XY{X: (float64(j) + 0.5) * secs, Y: float64(v)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		// Strategies that admit alike overlap: dashes let the lines
		// beneath show through.
		if i > 0 {
			l.Dashes = []vg.Length{vg.Points(float64(2 + 2*i)), vg.Points(float64(2 + i))}
		}
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// WriteChart writes the chart in format "png" or "svg".
func WriteChart(w io.Writer, r *Result, format string) error {
	p, err := Chart(r)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(vg.Length(ChartWidth)*vg.Inch/chartDPI, vg.Length(ChartHeight)*vg.Inch/chartDPI, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"share": func(a, o int64) string {
		if o == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(o))
	},
	"percent": func(f float64) float64 { return 100 * f },
	"windows": func(m map[string]int64) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, _ := time.ParseDuration(keys[i])
			b, _ := time.ParseDuration(keys[j])
			return a < b
		})
		var out bytes.Buffer
		for i, k := range keys {
			if i > 0 {
				out.WriteString(", ")
			}
			fmt.Fprintf(&out, "%d in %s", m[k], k)
		}
		return out.String()
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sluice sim: {{.S.Scenario}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1250px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.chart svg { width: 100%; height: auto; }
.muted { color: #666; }
</style>
</head>
<body>
<h1>sluice sim: {{.S.Scenario}}</h1>
<p>{{.Description}}</p>
<p class="muted">{{.S.Events}} requests over {{.Duration}}, seed {{.S.Seed}}, slices of {{.S.SliceMs}} ms.</p>
<div class="chart" id="chart">{{.SVG}}</div>
<table id="summary">
<thead><tr><th>strategy</th><th>offered</th><th>admitted</th><th>admitted share</th><th>most admitted in a window</th><th>fairness (Jain)</th><th>greediest caller's share</th></tr></thead>
<tbody>
{{range .S.Strategies}}<tr><td>{{.Name}}</td><td>{{.Offered}}</td><td>{{.Admitted}}</td><td>{{share .Admitted .Offered}}</td><td>{{windows .MaxInWindow}}</td><td>{{printf "%.3f" .Fairness}}</td><td>{{printf "%.1f%%" (percent .GreediestShare)}} ({{.GreediestCaller}})</td></tr>
{{end}}</tbody>
</table>
</body>
</html>
`))

// WriteReport writes one self-contained HTML page: the chart (inline SVG)
// and the summary table.
func WriteReport(w io.Writer, r *Result, description string) error {
	var svg bytes.Buffer
	if err := WriteChart(&svg, r, "svg"); err != nil {
		return err
	}
	// The SVG as gonum writes it starts with an XML prolog; inline, it
	// starts at <svg.
	b := svg.Bytes()
	if i := bytes.Index(b, []byte("<svg")); i > 0 {
		b = b[i:]
	}
	return reportTemplate.Execute(w, map[string]any{
		"S":           NewSummary(r),
		"Description": description,
		"Duration":    r.Params.Duration.String(),
		"SVG":         template.HTML(b), // gonum's own SVG
	})
}

// WriteDir writes series.csv, summary.json, chart.png, chart.svg and
// report.html into dir, creating it.
func WriteDir(dir string, r *Result, description string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, f func(io.Writer) error) error {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644)
	}
	steps := []struct {
		name string
		f    func(io.Writer) error
	}{
		{"series.csv", func(w io.Writer) error { return WriteCSV(w, r) }},
		{"summary.json", func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(NewSummary(r))
		}},
		{"chart.png", func(w io.Writer) error { return WriteChart(w, r, "png") }},
		{"chart.svg", func(w io.Writer) error { return WriteChart(w, r, "svg") }},
		{"report.html", func(w io.Writer) error { return WriteReport(w, r, description) }},
	}
	for _, s := range steps {
		if err := write(s.name, s.f); err != nil {
			return err
		}
	}
	return nil
}

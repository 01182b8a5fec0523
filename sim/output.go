package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart sizes: the PNG is chartWidth × chartHeight(strategies) pixels.
const (
	chartWidth = 1200
	chartDPI   = 96
)

// writeCSV writes the series: t_ms,strategy,offered,admitted,in_flight,
// one row per slice per strategy, slices in time order, strategies in run
// order.
func writeCSV(w io.Writer, r *Result) error {
	var b bytes.Buffer
	b.WriteString("t_ms,strategy,offered,admitted,in_flight\n")
	for i := 0; i < r.Slices; i++ {
		t := strconv.FormatInt((r.Slice * time.Duration(i)).Milliseconds(), 10)
		for _, s := range r.Strategies {
			b.WriteString(t)
			b.WriteByte(',')
			b.WriteString(csvField(s.Name))
			fmt.Fprintf(&b, ",%d,%d,%d\n", s.Offered[i], s.Admitted[i], s.InFlight[i])
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

// summaryJSON is summary.json.
type summaryJSON struct {
	Scenario   string            `json:"scenario"`
	Seed       uint64            `json:"seed"`
	DurationMs int64             `json:"duration_ms"`
	Rate       float64           `json:"rate,omitempty"`
	Callers    int               `json:"callers,omitempty"`
	Events     int               `json:"events"`
	SliceMs    int64             `json:"slice_ms"`
	Strategies []strategySummary `json:"strategies"`
}

// strategySummary is one strategy in summary.json.
type strategySummary struct {
	Name string `json:"name"`
	Summary
}

// newSummary gathers a result's summary.
func newSummary(r *Result) summaryJSON {
	out := summaryJSON{
		Scenario: r.Scenario, Seed: r.Seed, DurationMs: r.Params.Duration.Milliseconds(),
		Rate: r.Params.Rate, Callers: r.Params.Callers, Events: r.Events, SliceMs: r.Slice.Milliseconds(),
	}
	for _, s := range r.Strategies {
		out.Strategies = append(out.Strategies, strategySummary{Name: s.Name, Summary: s.Summary})
	}
	return out
}

// palette holds a line colour per strategy.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// chartPanels are the chart's panels, one above the other: the offered
// requests per slice, then, for each strategy, what it admitted per slice
// on one scale for them all (admitted traffic on its own scale, not
// dwarfed by what was offered), titled with the strategy's limits.
func chartPanels(r *Result) ([]*plot.Plot, error) {
	secs := r.Slice.Seconds()
	series := func(p *plot.Plot, vs []int64, c color.RGBA) error {
		pts := make(plotter.XYs, len(vs))
		for j, v := range vs {
			pts[j] = plotter.XY{X: (float64(j) + 0.5) * secs, Y: float64(v)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		p.Add(l, plotter.NewGrid())
		return nil
	}
	panel := func(title string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.Title.TextStyle.Font.Size = vg.Points(11)
		p.Y.Label.Text = "per " + r.Slice.String()
		p.X.Min, p.X.Max = 0, float64(len(r.Strategies[0].Offered))*secs
		p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
		return p
	}
	offered := panel(fmt.Sprintf("%s: requests offered per %v (every strategy gets the same)", r.Scenario, r.Slice))
	offered.Y.Min = 0
	if err := series(offered, r.Strategies[0].Offered, color.RGBA{R: 0x88, G: 0x88, B: 0x88, A: 0xff}); err != nil {
		return nil, err
	}
	// Requests in flight: every strategy on one panel, so that a limit on
	// starts (which lets work pile up when requests run long) and one on
	// slots (which holds it at its limit) show side by side.
	flight := panel(fmt.Sprintf("requests in flight (each admitted request runs %v; most at once per %v)", r.Params.RunFor, r.Slice))
	flight.Y.Min = 0
	flight.Y.Label.Text = "at once"
	flight.Legend.Top = true // in the room above the lines (Y.Max below)
	var mostFlight int64 = 1
	for _, s := range r.Strategies {
		mostFlight = max(mostFlight, s.Summary.MaxInFlight)
	}
	flight.Y.Max = float64(mostFlight) * (1.2 + 0.15*float64(len(r.Strategies)))
	for i, s := range r.Strategies {
		if err := series(flight, s.InFlight, palette[i%len(palette)]); err != nil {
			return nil, err
		}
		flight.Legend.Add(s.Name, flightLegend(palette[i%len(palette)]))
	}
	plots := []*plot.Plot{offered, flight}
	var most int64 = 1
	for _, s := range r.Strategies {
		for _, v := range s.Admitted {
			most = max(most, v)
		}
	}
	for i, s := range r.Strategies {
		p := panel(fmt.Sprintf("%s: admitted %d of %d (%s)", s.Name, s.Summary.Admitted, s.Summary.Offered, share(s.Summary.Admitted, s.Summary.Offered)))
		p.Y.Min, p.Y.Max = 0, float64(most)*1.05
		if err := series(p, s.Admitted, palette[i%len(palette)]); err != nil {
			return nil, err
		}
		plots = append(plots, p)
	}
	plots[len(plots)-1].X.Label.Text = "time (s)"
	return plots, nil
}

// plainTicks are gonum's default ticks labelled as plain numbers: 500, not
// 500.00, as every panel's counts are whole.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// flightLegend is a legend entry of a strategy's colour.
func flightLegend(c color.RGBA) plot.Thumbnailer {
	l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}})
	l.Color, l.Width = c, vg.Points(1.5)
	return l
}

// chartHeight returns the height of chart.png for a result of n
// strategies: a panel for the offered requests, one for the requests in
// flight and one per strategy.
func chartHeight(n int) int { return chartPanelHeight * (n + 2) }

// chartPanelHeight is the height of one panel, in pixels.
const chartPanelHeight = 170

// writeChart writes the chart (chartPanels) in format "png" or "svg".
func writeChart(w io.Writer, r *Result, format string) error {
	if len(r.Strategies) == 0 {
		return fmt.Errorf("sim: no strategy to chart")
	}
	plots, err := chartPanels(r)
	if err != nil {
		return err
	}
	return drawColumn(w, plots, chartWidth, chartHeight(len(r.Strategies)), format)
}

// drawColumn draws plots one above the other, aligned, on a canvas of
// width × height pixels.
func drawColumn(w io.Writer, plots []*plot.Plot, width, height int, format string) error {
	c, err := draw.NewFormattedCanvas(vg.Length(width)*vg.Inch/chartDPI, vg.Length(height)*vg.Inch/chartDPI, format)
	if err != nil {
		return err
	}
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	t := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	canvases := plot.Align(rows, t, draw.New(c))
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	_, err = c.WriteTo(w)
	return err
}

// callersChart is who got through: for each strategy, the requests it
// admitted per caller, on average over each class of callers
// (Summary.Classes: slow and fast), on the scale of the data.
func callersChart(r *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "who got through: requests admitted per caller, on average, by class of caller"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.Text = "admitted per caller"
	p.Y.Min = 0
	names := make([]string, len(r.Strategies))
	for i, s := range r.Strategies {
		names[i] = s.Name
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Legend.Top = true
	var classes []string
	if len(r.Strategies) > 0 {
		for _, c := range r.Strategies[0].Summary.Classes {
			classes = append(classes, c.Name)
		}
	}
	width := vg.Points(float64(chartWidth) / float64(max(1, len(names))) / float64(len(classes)+1) * 0.45)
	most := 1.0
	for _, s := range r.Strategies {
		for _, c := range s.Summary.Classes {
			if c.Callers > 0 {
				most = max(most, float64(c.Admitted)/float64(c.Callers))
			}
		}
	}
	p.Y.Max = most * 1.15
	for k, class := range classes {
		vals := make(plotter.Values, len(r.Strategies))
		for i, s := range r.Strategies {
			for _, c := range s.Summary.Classes {
				if c.Name == class && c.Callers > 0 {
					vals[i] = float64(c.Admitted) / float64(c.Callers)
				}
			}
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		b.Color = []color.RGBA{{R: 0x9e, G: 0xca, B: 0xe1, A: 0xff}, {R: 0x31, G: 0x82, B: 0xbd, A: 0xff}, {R: 0x08, G: 0x51, B: 0x9c, A: 0xff}}[k%3]
		b.LineStyle.Width = 0
		b.Offset = width * vg.Length(float64(k)-float64(len(classes)-1)/2)
		p.Add(b)
		p.Legend.Add(class, b)
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// writeCallersChart writes callersChart in format "png" or "svg".
func writeCallersChart(w io.Writer, r *Result, format string) error {
	p, err := callersChart(r)
	if err != nil {
		return err
	}
	return drawColumn(w, []*plot.Plot{p}, chartWidth, callersChartHeight, format)
}

// callersChartHeight is the height of callers.png, in pixels.
const callersChartHeight = 320

// share renders a as a share of o.
func share(a, o int64) string {
	if o == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(o))
}

// reading says in a few sentences what the charts show for r, and which
// strategy suits what.
func reading(r *Result) []string {
	var out []string
	if len(r.Strategies) == 0 {
		return out
	}
	fair, total := 0, 0
	for i, s := range r.Strategies {
		if s.Summary.Fairness > r.Strategies[fair].Summary.Fairness {
			fair = i
		}
		if s.Summary.Admitted > r.Strategies[total].Summary.Admitted {
			total = i
		}
	}
	for _, s := range r.Strategies {
		line := fmt.Sprintf("%s admitted %s of what was offered", s.Name, share(s.Summary.Admitted, s.Summary.Offered))
		if len(s.Summary.Classes) == 2 {
			q, b := s.Summary.Classes[0], s.Summary.Classes[1]
			line += fmt.Sprintf(": %.1f requests to each of its %d %s on average, %.1f to each of its %d %s", float64(q.Admitted)/float64(q.Callers), q.Callers, q.Name, float64(b.Admitted)/float64(b.Callers), b.Callers, b.Name)
		}
		line += fmt.Sprintf("; the greediest caller took %.1f%% of all it admitted (fairness %.2f, 1 is even); at most %d ran at once.", 100*s.Summary.GreediestShare, s.Summary.Fairness, s.Summary.MaxInFlight)
		out = append(out, line)
	}
	alike := true
	for _, s := range r.Strategies {
		a := r.Strategies[0].Summary
		alike = alike && s.Summary.Admitted == a.Admitted && math.Abs(s.Summary.Fairness-a.Fairness) < 0.005
	}
	switch {
	case len(r.Strategies) == 1:
	case alike:
		out = append(out, "Every strategy admitted the same, as evenly: on this traffic their limits act alike.")
	case fair == total:
		out = append(out, fmt.Sprintf("%s admits the most, and shares it most evenly among callers.", r.Strategies[fair].Name))
	default:
		out = append(out, fmt.Sprintf("%s shares what it admits most evenly among callers; %s admits the most.", r.Strategies[fair].Name, r.Strategies[total].Name))
	}
	// The scope of the limits, when the strategies differ in it.
	scopes := map[string]bool{}
	for _, s := range r.Strategies {
		scopes[s.scope] = true
	}
	if len(scopes) > 1 {
		out = append(out, "A limit of each caller's own shares capacity evenly but does not bound the total; one limit shared by all bounds the total but lets the fastest callers take most of it; both together bound the total and share it. Choose by what must be protected: the backend (a shared limit) or each caller's fair turn (a per-caller limit), or both.")
	}
	return out
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"share":   share,
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
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.limits { text-align: left; }
td.limits code { display: block; white-space: pre-wrap; font-size: 0.85em; }
.chart svg { width: 100%; height: auto; }
.muted { color: #666; }
</style>
</head>
<body>
<h1>sluice sim: {{.S.Scenario}}</h1>
<p>{{.Description}}</p>
<p class="muted">{{.S.Events}} requests over {{.Duration}}, seed {{.S.Seed}}, slices of {{.S.SliceMs}} ms.</p>
<h2>What it shows</h2>
<ul id="reading">
{{range .Reading}}<li>{{.}}</li>
{{end}}</ul>
<h2>Admitted over time</h2>
<p class="muted">The top panel is what every strategy was offered; then how many admitted requests ran at once under each (every one runs {{.RunFor}}); below, what each admitted, all on one scale.</p>
<div class="chart" id="chart">{{.SVG}}</div>
<h2>Who got through</h2>
<div class="chart" id="callers">{{.Callers}}</div>
<h2>Summary</h2>
<table id="summary">
<thead><tr><th>strategy</th><th>limits</th><th>offered</th><th>admitted</th><th>admitted share</th><th>most admitted in a window</th><th>most in flight</th><th>fairness (Jain)</th><th>greediest caller's share</th></tr></thead>
<tbody>
{{range .S.Strategies}}<tr><td>{{.Name}}</td><td class="limits">{{range .Limits}}<code>{{.}}</code>{{end}}</td><td>{{.Offered}}</td><td>{{.Admitted}}</td><td>{{share .Admitted .Offered}}</td><td>{{windows .MaxInWindow}}</td><td>{{.MaxInFlight}}</td><td>{{printf "%.3f" .Fairness}}</td><td>{{printf "%.1f%%" (percent .GreediestShare)}} ({{.GreediestCaller}})</td></tr>
{{end}}</tbody>
</table>
</body>
</html>
`))

// inlineSVG renders a chart as SVG to put inside the page: from <svg on,
// without the XML prolog.
func inlineSVG(write func(io.Writer, *Result, string) error, r *Result) (template.HTML, error) {
	var svg bytes.Buffer
	if err := write(&svg, r, "svg"); err != nil {
		return "", err
	}
	b := svg.Bytes()
	if i := bytes.Index(b, []byte("<svg")); i > 0 {
		b = b[i:]
	}
	return template.HTML(b), nil // gonum's own SVG
}

// writeReport writes one self-contained HTML page: a few sentences on what
// the run shows, the charts (inline SVG) and the summary table with each
// strategy's limits.
func writeReport(w io.Writer, r *Result, description string) error {
	chart, err := inlineSVG(writeChart, r)
	if err != nil {
		return err
	}
	callers, err := inlineSVG(writeCallersChart, r)
	if err != nil {
		return err
	}
	return reportTemplate.Execute(w, map[string]any{
		"S":           newSummary(r),
		"Description": description,
		"Duration":    r.Params.Duration.String(),
		"RunFor":      r.Params.RunFor.String(),
		"Reading":     reading(r),
		"SVG":         chart,
		"Callers":     callers,
	})
}

// WriteDir writes series.csv, summary.json, chart.png, chart.svg,
// callers.png and report.html into dir, creating it.
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
		{"series.csv", func(w io.Writer) error { return writeCSV(w, r) }},
		{"summary.json", func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(newSummary(r))
		}},
		{"chart.png", func(w io.Writer) error { return writeChart(w, r, "png") }},
		{"chart.svg", func(w io.Writer) error { return writeChart(w, r, "svg") }},
		{"callers.png", func(w io.Writer) error { return writeCallersChart(w, r, "png") }},
		{"report.html", func(w io.Writer) error { return writeReport(w, r, description) }},
	}
	for _, s := range steps {
		if err := write(s.name, s.f); err != nil {
			return err
		}
	}
	return nil
}

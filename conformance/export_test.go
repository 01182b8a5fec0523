package conformance

// For the package's own tests: the rendering of a result in their
// failure messages, and the races Run runs (TestEveryKindCovered).
var (
	Format = format
	Racers = append(append([]racer(nil), coreRacers...), windowedRacers...)
)

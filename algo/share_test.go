package algo

import "testing"

func TestShareStep(t *testing.T) {
	for _, c := range []struct {
		name      string
		s         Share
		ask, back int64
	}{
		// 2 units a ms, a horizon of 100ms: one horizon is 200 units, the
		// aim is 400.
		{"empty asks for two horizons", Share{Limit: 10000, Held: 0, Rate: 0.002, Left: 10e6, Horizon: 1e5}, 400, 0},
		{"below one horizon tops up", Share{Limit: 10000, Held: 150, Rate: 0.002, Left: 10e6, Horizon: 1e5}, 250, 0},
		{"enough asks nothing", Share{Limit: 10000, Held: 300, Rate: 0.002, Left: 10e6, Horizon: 1e5}, 0, 0},
		{"never beyond the limit", Share{Limit: 100, Held: 0, Rate: 0.002, Left: 10e6, Horizon: 1e5}, 100, 0},
		{"near the end, only what the window can spend", Share{Limit: 10000, Held: 0, Rate: 0.002, Left: 5e4, Horizon: 1e5}, 100, 0},
		{"demand gone gives all back", Share{Limit: 10000, Held: 300, Rate: 0, Left: 10e6, Horizon: 1e5}, 0, 300},
		{"more than the window can spend goes back", Share{Limit: 10000, Held: 900, Rate: 0.002, Left: 2e5, Horizon: 1e5}, 0, 500},
		{"a window over holds nothing", Share{Limit: 10000, Held: 7, Rate: 0.002, Left: 0, Horizon: 1e5}, 0, 7},
		{"a sliver of demand asks one", Share{Limit: 10000, Held: 0, Rate: 1e-9, Left: 10e6, Horizon: 1e5}, 1, 0},
	} {
		ask, back := c.s.Step()
		if ask != c.ask || back != c.back {
			t.Errorf("%s: Step() = ask %d, back %d, want %d, %d", c.name, ask, back, c.ask, c.back)
		}
	}
}

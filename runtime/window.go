package runtime

// failureWindow is a sliding-window failure detector (G9): it trips when at
// least threshold of the last size results failed. Unlike a consecutive
// counter, an occasional success between failures does not reset it.
type failureWindow struct {
	size, threshold int
	results         []bool // ring of the last size results; true = failed
	next, n         int
}

// DefaultWindow is the default detector: 3 failures in the last 5 results.
var DefaultWindow = WindowPolicy{Size: 5, Threshold: 3}

// WindowPolicy configures the failure detector.
type WindowPolicy struct {
	Size      int `json:"size"`
	Threshold int `json:"threshold"`
}

func newFailureWindow(p WindowPolicy) *failureWindow {
	if p.Size <= 0 || p.Threshold <= 0 || p.Threshold > p.Size {
		p = DefaultWindow
	}
	return &failureWindow{size: p.Size, threshold: p.Threshold, results: make([]bool, p.Size)}
}

// record adds a result and reports whether the detector tripped.
func (w *failureWindow) record(failed bool) bool {
	w.results[w.next] = failed
	w.next = (w.next + 1) % w.size
	if w.n < w.size {
		w.n++
	}
	return w.failures() >= w.threshold
}

func (w *failureWindow) failures() int {
	c := 0
	for i := 0; i < w.n; i++ {
		if w.results[i] {
			c++
		}
	}
	return c
}

// reset forgets every result (after a recovery).
func (w *failureWindow) reset() {
	clear(w.results)
	w.next, w.n = 0, 0
}

package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// Metrics are the daemon's Prometheus metrics.
type Metrics struct {
	reg       *prometheus.Registry
	fsync     prometheus.Histogram
	watchdogs *prometheus.CounterVec
	ended     *prometheus.CounterVec
	stalls    *prometheus.CounterVec
}

// NewMetrics registers belay's metrics, reading live values from rt.
func NewMetrics(rt *runtime.Runtime) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "belay_journal_fsync_seconds",
			Help:    "Latency of journal fdatasync calls (one per group commit).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		}),
		watchdogs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "belay_watchdog_firings_total",
			Help: "Inactivity tier expiries, by tier.",
		}, []string{"tier"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "belay_runs_ended_total",
			Help: "Runs that reached a terminal status since the daemon started, by status.",
		}, []string{"status"}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "belay_run_stalls_total",
			Help: "Runners stopped because the store refused a write (their runs are retried), by cause: disk_full or write_error.",
		}, []string{"cause"}),
	}
	m.reg.MustRegister(m.fsync, m.watchdogs, m.ended, m.stalls, &liveCollector{rt: rt},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveFsync records one fdatasync.
func (m *Metrics) ObserveFsync(d time.Duration) { m.fsync.Observe(d.Seconds()) }

// Watchdog counts a watchdog firing.
func (m *Metrics) Watchdog(tier belay.Tier) { m.watchdogs.WithLabelValues(string(tier)).Inc() }

// RunEnded counts a run that ended.
func (m *Metrics) RunEnded(run belay.Run) { m.ended.WithLabelValues(string(run.Status)).Inc() }

// RunStalled counts a runner stopped by a refused write.
func (m *Metrics) RunStalled(err error) {
	cause := "write_error"
	if errors.Is(err, belay.ErrDiskFull) {
		cause = "disk_full"
	}
	m.stalls.WithLabelValues(cause).Inc()
}

// liveCollector reports values read at scrape time.
type liveCollector struct{ rt *runtime.Runtime }

var (
	descRuns       = prometheus.NewDesc("belay_runs", "Runs in the store, by status.", []string{"status"}, nil)
	descQueue      = prometheus.NewDesc("belay_queue_depth", "Runs waiting for admission.", nil, nil)
	descActive     = prometheus.NewDesc("belay_active_runs", "Runs executing (holding a run lease).", nil, nil)
	descDeliveries = prometheus.NewDesc("belay_deliveries", "Inbox items, by status; leased ones hold an active delivery lease.", []string{"status"}, nil)
)

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descQueue
	ch <- descActive
	ch <- descDeliveries
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.rt.Stats()
	if st.Queued >= 0 { // -1: the store did not answer; no sample beats a wrong one
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(st.Queued))
	}
	ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(st.Active))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[belay.RunStatus]int{}
	if sc, ok := c.rt.Store().(store.RunStatusCounter); ok {
		if n, err := sc.RunStatusCounts(ctx); err == nil {
			counts = n
		}
	} else if runs, err := c.rt.Store().Runs(ctx, belay.RunFilter{}); err == nil {
		for _, r := range runs {
			counts[r.Status]++
		}
	}
	for _, s := range []belay.RunStatus{belay.RunQueued, belay.RunRunning, belay.RunComplete, belay.RunFailed, belay.RunCancelled, belay.RunStranded} {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	dcounts := map[belay.DeliveryStatus]int{}
	if ds, err := c.rt.Store().Deliveries(ctx, belay.DeliveryFilter{}); err == nil {
		for _, d := range ds {
			dcounts[d.Status]++
		}
	}
	for _, s := range []belay.DeliveryStatus{belay.DeliveryPending, belay.DeliveryLeased, belay.DeliveryDone, belay.DeliveryError} {
		ch <- prometheus.MustNewConstMetric(descDeliveries, prometheus.GaugeValue, float64(dcounts[s]), string(s))
	}
}

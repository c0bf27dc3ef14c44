// Package runtime executes runs: admission with conversation leases and
// caps (G4, G5), fenced run leases (G6), inbox deliveries with persisted
// lease timers (G7), an activity-aware watchdog (G8), bounded recovery that
// never repeats side effects (G9), reconciliation of a previous
// incarnation's runs on start, and retention (G12). It is the library the
// daemon serves; Runtime is its entry point.
package runtime

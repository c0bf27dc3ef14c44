// Package belay is the domain vocabulary of belay, a durable session
// runtime for long-running AI agent work: sessions, runs, events,
// deliveries, leases and the errors they return, every event type name and
// the payload of each event. It imports only the standard library, so
// every other package (and any program that reads belay's events) can
// use it; see docs/architecture.md.
//
// A Session is a durable handle to one provider conversation. Its Events are
// journaled with gap-free sequence numbers; its Runs are executed under
// leases whose epochs fence stale writers; its Deliveries are inbox items
// handed to consumers with lease and ack. See shared/DESIGN.md for the
// guarantees (G1-G12) every part defends.
package belay

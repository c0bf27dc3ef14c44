// Package doctor diagnoses one session: from the session's state, its runs
// and deliveries, and what the caller learnt about the daemon, the data-dir
// lock and the journal, [Diagnose] builds an [apitype.DoctorReport] (the
// report is wire vocabulary, defined in package apitype) with diagnostics
// and exactly one [apitype.DoctorAction] to take next, a one-sentence
// reason and the exact command to run.
//
// Diagnose is pure: it does no I/O, reads no clock (Input.Now is the time of
// the diagnosis) and starts no goroutine, so the daemon and the offline CLI
// (daemon down, state folded from the files) give the same answer for the
// same facts (G11). The same Input always gives the same Report.
//
// A report never holds prompt or answer text. Input carries no events and no
// run input; of the domain values it does carry, Diagnose never reads
// Delivery.Data, Delivery.Result, Delivery.Key, Session.Options,
// Session.Labels, Run.IdempotencyKey or RunError.Message, reads Run.Reason
// only for the name of a side-effecting tool, and echoes identifiers and URLs
// only after redaction. docs/doctor.md specifies the JSON schema, the
// decision table (rules, in order; the first that matches decides) and the
// redaction rules.
package doctor

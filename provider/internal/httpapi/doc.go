// Package httpapi is the HTTP plumbing the openai and anthropic providers
// share: a client with connect, first-byte and idle timeouts, the mapping
// of HTTP statuses, API error bodies and network failures to belay's error
// classes (with Retry-After), API key loading (environment, a mode 0600
// file, or inline), and the scrubbing of secrets from every message a
// provider reports.
//
// It is internal to the provider tree: a seam, not a promise.
package httpapi

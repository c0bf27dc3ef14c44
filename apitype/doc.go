// Package apitype is the vocabulary of belay's HTTP API v1: the request
// and response bodies, the stable error codes, the stream trailers, the
// doctor report and the paging limits. Together with package belay (the
// sessions, runs, events and errors they carry) it is everything a client
// needs: it imports only the standard library and package belay, so a
// client never depends on the server, the runtime or a store. The API is
// documented in docs/api.md.
package apitype

// Package api is belay's HTTP API v1: the handlers the daemon serves. The
// wire types it and the client speak are in package apitype. Errors are
// {"error":{"code","message","details"}}; POSTs take an Idempotency-Key
// header; bodies are size-limited and ids are checked against their
// grammar before anything touches a store. The API is documented in
// docs/api.md.
package api

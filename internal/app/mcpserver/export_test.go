package mcpserver

import "time"

// SetNow sets the clock HTTP keeps its scopes' idle times by.
func (h *HTTP) SetNow(now func() time.Time) {
	h.mu.Lock()
	h.now = now
	h.mu.Unlock()
}

// Scopes is how many scopes' servers run.
func (h *HTTP) Scopes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

package h1

// hangupsWatching is how many connections the hangup poller holds now.
func hangupsWatching() int {
	h := &hangupPoller
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byID)
}

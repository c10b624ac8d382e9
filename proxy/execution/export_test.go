package execution

// Woken reports whether a signal waits for the client's goroutine: what
// Await would see at once.
func (c *Call) Woken() bool { return len(c.wake) > 0 }

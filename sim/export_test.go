package sim

// Held counts what the server holds per task: events in its timer heap,
// issued tokens, and fingerprints and submits in the duplicate book.
func (s *Server) Held() (events, tokens, fingerprints, submits int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens.mu.Lock()
	defer s.tokens.mu.Unlock()
	return len(s.table.events), len(s.tokens.issued), len(s.st.submissions.byFP), len(s.st.submissions.order)
}

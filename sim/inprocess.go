package sim

import (
	"net/http"
	"net/http/httptest"
)

// InProcessBaseURL is a base URL for InProcessClient: its requests never
// leave the process, so the host is only a name.
const InProcessBaseURL = "http://sim.invalid"

// InProcessClient returns an http.Client whose requests s serves in the
// calling goroutine, with no socket, as if they came from 127.0.0.1:
// inside a testing/synctest bubble the simulator and its client then run
// on the bubble's fake clock, so what a test counts does not depend on
// how late a loaded machine's timers fire. Send it to InProcessBaseURL.
func (s *Server) InProcessClient() *http.Client {
	return &http.Client{Transport: inProcess{s}}
}

type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	in := r.Clone(r.Context())
	in.RemoteAddr, in.RequestURI = "127.0.0.1:40000", r.URL.RequestURI()
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, in)
	return rec.Result(), nil
}

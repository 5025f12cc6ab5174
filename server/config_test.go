package server_test

import (
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
)

// TestConfigListsEveryProblem: New reports all the problems of a Config
// at once, each naming its field.
func TestConfigListsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := server.New(server.Config{
		Queue:         captchaq.Config{Provider: stubProvider{}},
		Backend:       fakeBackend{},
		PublicURL:     "https://example.com",
		Clients:       []server.Client{{Name: "x y", Key: "short"}},
		HistoryEvery:  time.Minute,
		HistoryWindow: time.Second,
		MaxAttempts:   -1,
		MaxStreams:    -2,
		SubmitWait:    -time.Second,
	})
	want := `server: Clients: [0].name: "x y" must be 1-64 letters, digits, '.', '_' or '-'
[0].key: client "x y" needs a key of at least 8 characters
server: HistoryEvery 1m0s and HistoryWindow 1s: give a positive HistoryEvery and a HistoryWindow at least as long (or neither, for 5s and 1h0m0s)
server: MaxAttempts: must be positive, got -1
server: MaxStreams: must not be negative (0 for the default)
server: SubmitWait: must not be negative (0 for the default)
server: Config.Queue and Config.Backend: set one, not both (Queue builds a local queue; Backend replaces it)
server: Config.PublicURL: provider pingbacks need the local queue; with a Backend the provider is the Backend's business`
	if err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant: %s", err, want)
	}
}

// fakeBackend and stubProvider are never called: New refuses the Config
// before it uses them.
type (
	fakeBackend  struct{ server.Backend }
	stubProvider struct{ captchaq.Provider }
)

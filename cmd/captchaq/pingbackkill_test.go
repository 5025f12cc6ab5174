package main

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/store/postgres"
)

// TestFrontReplicaKilledWithPingbackInFlight: replica A records a task's
// answer and calls its pingback; the receiver holds that call open and A
// is SIGKILLed under it. Replica B, started then on the same database,
// sends the pingback once A's lease on it has ended (its attempts plus
// --pingback-grace): the receiver answers it, gets the task's token,
// once, and the store owes nothing after.
func TestFrontReplicaKilledWithPingbackInFlight(t *testing.T) {
	t.Parallel()
	db := pgStoreURL(t)
	_, replica := frontFleet(t, "test-cli-pbk-", db)
	a, addrA := replica("--pingback-grace", "1s")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan string, 1)
	var mu sync.Mutex
	answered := map[string]int{} // id=code → calls answered
	rx := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		select {
		case held <- r.Form.Get("id"): // the first call: held until its caller dies
			<-r.Context().Done()
			return
		default:
		}
		mu.Lock()
		answered[r.Form.Get("id")+"="+r.Form.Get("code")]++
		mu.Unlock()
	})}
	go rx.Serve(ln)
	t.Cleanup(func() { rx.Close() })

	v := frontTask(0)
	v.Set("pingback", "http://"+ln.Addr().String()+"/cb")
	id, err := inPHP("http://"+addrA, v)
	if err != nil {
		t.Fatal(err)
	}
	if got := testbound.Receive(t, "replica A's pingback call", held); got != id {
		t.Fatalf("the held pingback is for %q, want %q", got, id)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, addrB := replica("--pingback-grace", "1s")
	ans, err := resPHPAnswer(t, "http://"+addrB, id)
	token, ok := strings.CutPrefix(ans, "OK|")
	if err != nil || !ok {
		t.Fatalf("res.php %s at B: %q, %v", id, ans, err)
	}

	st, err := postgres.Open(t.Context(), db, postgres.Config{Retention: postgres.RetentionOff})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testbound.Until(t, "B to send the pingback and mark it done", func() bool {
		var done bool
		err := st.Pool().QueryRow(t.Context(), `SELECT pingback_owed IS NULL FROM tasks WHERE id = $1`, "qa/"+id).Scan(&done)
		return err == nil && done
	})
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{id + "=" + token: 1}; len(answered) != 1 || answered[id+"="+token] != 1 {
		t.Errorf("pingbacks answered after A's death: %v, want %v", answered, want)
	}
}

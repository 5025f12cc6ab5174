package server_test

import (
	"encoding/base64"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/checks"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/sim"
)

// A task that comes by in.php to a gateway is validated once at the
// door (the front checks it with the gateway's rules, and the gateway
// publishes the ValidTask without checking it again), and once by the
// worker that takes its message from the broker: another process, whose
// door is the delivery (a worker refuses a malformed message whoever
// published it). An image is decoded once at each.
func TestGatewayValidatesEachTaskOnceAtEachDoor(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 4, LatencyScale: 0.01, PollBan: sim.PollBan{Disabled: true}})
	g := f.serve("once", filepath.Join(t.TempDir(), "gateway.db"), nil)
	page := "https://shop.example/" + t.Name()
	body := base64.StdEncoding.EncodeToString([]byte("GIF89a " + t.Name()))
	turnstile, stopT := tasktest.Checks(func(p map[string]string) bool { return p["pageurl"] == page })
	defer stopT()
	image, stopI := tasktest.Checks(func(p map[string]string) bool { return p["body"] == body })
	defer stopI()

	tid := g.inOK(t, keyQA, url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {page}})
	iid := g.inOK(t, keyQA, url.Values{"method": {"base64"}, "body": {body}})
	// No worker yet: what is counted is the gateway's.
	once := map[checks.Kind]int{checks.Queue: 1, checks.Provider: 1}
	if d := cmp.Diff(once, turnstile()); d != "" {
		t.Errorf("turnstile task's checks at the gateway (-want +got):\n%s", d)
	}
	onceImage := map[checks.Kind]int{checks.Queue: 1, checks.Provider: 1, checks.Decode: 1}
	if d := cmp.Diff(onceImage, image()); d != "" {
		t.Errorf("image task's checks at the gateway (-want +got):\n%s", d)
	}

	f.worker("once-w", 2)
	for _, id := range []string{tid, iid} {
		if ans := g.resFinal(t, keyQA, id); len(ans) < 4 || ans[:3] != "OK|" {
			t.Fatalf("res.php %s: %q", id, ans)
		}
	}
	twice := map[checks.Kind]int{checks.Queue: 2, checks.Provider: 2}
	if d := cmp.Diff(twice, turnstile()); d != "" {
		t.Errorf("turnstile task's checks, gateway and worker (-want +got):\n%s", d)
	}
	twiceImage := map[checks.Kind]int{checks.Queue: 2, checks.Provider: 2, checks.Decode: 2}
	if d := cmp.Diff(twiceImage, image()); d != "" {
		t.Errorf("image task's checks, gateway and worker (-want +got):\n%s", d)
	}
}

// On the server's own queue, a task that comes by in.php or the JSON API
// is validated once: the front checks it with the queue's rules and the
// queue takes the ValidTask (SubmitValid) as it is.
func TestLocalQueueValidatesEachTaskOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	page := "https://shop.example/" + t.Name()
	inPHP, stopIn := tasktest.Checks(func(p map[string]string) bool { return p["pageurl"] == page+"/in" })
	defer stopIn()
	api, stopAPI := tasktest.Checks(func(p map[string]string) bool { return p["pageurl"] == page+"/api" })
	defer stopAPI()

	id := b.inOK(t, keyQA, url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {page + "/in"}})
	b.api(t, "POST", "/v1/tasks", keyQA, `{"id":"once","method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"`+page+`/api"}}`, 202, nil)
	b.waitFinal(t, keyQA, "once")
	b.waitFinal(t, keyQA, id)
	once := map[checks.Kind]int{checks.Queue: 1, checks.Provider: 1}
	if d := cmp.Diff(once, inPHP()); d != "" {
		t.Errorf("in.php task's checks (-want +got):\n%s", d)
	}
	if d := cmp.Diff(once, api()); d != "" {
		t.Errorf("JSON API task's checks (-want +got):\n%s", d)
	}
}

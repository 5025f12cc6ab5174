package amqp

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
)

// TestLostDeliveryIsClaimed: a worker loses its connection (without
// crashing) between the provider's answer to a submit and its
// checkpoint's confirm, so the broker gives the task to another worker.
// That worker waits before submitting a redelivered copy; the first one
// reconnects, checkpoints the task and claims it, and the second drops its
// copy. The outcome: one paid solve, one result.
func TestLostDeliveryIsClaimed(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	var logB testbound.Buffer
	submitted, proceed := make(chan struct{}), make(chan struct{})
	a := p.worker(p.cA, &cutAfterSubmit{Client: p.clientA, submitted: submitted, proceed: proceed}, "claim-a", nil)
	b := p.worker(p.cB, p.clientB, "claim-b", slog.New(slog.NewTextHandler(&logB, nil)))
	p.run(a)
	p.consumers(1)
	const id = "claimed-0001"
	p.publish(id)
	p.wait(submitted, "worker a's submit")
	p.run(b)
	p.consumers(2)
	p.proxy.cut() // a's connection drops with the captcha id not yet checkpointed
	close(proceed)
	claimedOnce(p, id, b)
	if m := b.Queue().Metrics(); m.Submitted != 0 || m.Solved != 0 {
		t.Errorf("worker b's queue took %d tasks and solved %d, want none", m.Submitted, m.Solved)
	}
	if want := `msg="dropping a redelivered task another worker checkpointed" owner=claim-b id=` + id; !strings.Contains(logB.String(), want) {
		t.Errorf("worker b's log lacks %q (it never held the redelivered copy):\n%s", want, logB.String())
	}
}

// TestLostAckIsClaimed: a worker's connection dies between its first
// checkpoint's confirm and the broker reading the ack of the task's
// delivery (here the ack is never sent: the connection is cut in
// between), so the broker gives the task back to the fleet twice: the
// task delivery, requeued without its captcha id, and the checkpoint,
// dead-lettered to Names.Adopt. One paid solve, one result: the first
// worker claims the task once it hears the connection ended that soon
// after the ack (a worker holding the copy drops it), and a worker that
// holds the copy waiting when the checkpoint reaches it adopts the
// checkpoint and acks the copy. Before, the copy's worker solved it again
// after its wait (two paid solves, as TestFleetDroppedConnection saw
// under load); with the claim alone, the claim dropped the checkpoint
// held beside the copy: the task was lost.
//
// The ack's clock starts when it is sent, not at the confirm: here a's
// connection is heard from for longer than ackUnsure between the two (a
// slow machine's pause, stretched), and a still claims. Before, a counted
// the ack as the broker's and never claimed it (a test run beside two
// busy loops and other broker tests saw b never hear a claim).
func TestLostAckIsClaimed(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	a := p.worker(p.cA, p.clientA, "ack-a", nil)
	b := p.worker(p.cB, p.clientB, "ack-b", nil)
	var once sync.Once
	a.store.afterFirstConfirm = func(string) {
		once.Do(func() {
			confirmed := time.Now()
			p.run(b)
			if !testbound.Eventually(p.consuming(p.c.Names().Tasks, 2)) {
				t.Error("worker b never consumed")
			}
			p.cA.mu.Lock()
			epoch := p.cA.epoch
			p.cA.mu.Unlock()
			if !testbound.Eventually(func() bool { return p.cA.lastHeard(epoch).Sub(confirmed) > ackUnsure }) {
				t.Errorf("worker a's connection was not heard from %v after the confirm", ackUnsure)
			}
			p.proxy.cut()
			if !testbound.Eventually(func() bool { return p.cA.Reconnects() > 0 }) {
				t.Error("worker a's connection never dropped")
			}
		})
	}
	p.run(a)
	p.consumers(1)
	const id = "acked-0001"
	p.publish(id)
	claimedOnce(p, id, b)
}

// TestLateClaimDefers: a worker loses its connection between the
// provider's answer to a submit and its checkpoint's confirm, and decides
// at once to claim the task (its connection closed a moment ago), but its
// reconnect takes longer than a redelivered copy's wait: the worker that
// received the copy submits it. The late worker's checkpoint is confirmed
// on its new connection; a claim sent then would be heard by a worker at
// the provider already, and both would answer. It defers instead: it
// forfeits the task, and the copy's answer is the one answer. Two paid
// solves (the window), one result. Before, the claim went out late and
// the task was answered twice (a second result left in the queue).
//
// No claim goes out at all: the ack of a's task delivery, sent at the
// confirm on a closed channel, is not an unsure one to be claimed (a
// claim after the forfeit would drop the fleet's copy wherever it was
// not yet submitted: the task lost). Before, a claimed it anyway, from
// its sweeper, right after it deferred: the watcher heard that claim.
func TestLateClaimDefers(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	const id = "late-claim-0001"
	p.watchClaims("late-watcher")
	a, proceed := p.submitHeld("late-a", id)
	b := p.worker(p.cB, p.clientB, "late-b", nil)
	p.run(b)
	p.consumers(2)
	p.proxy.refuse(true)
	p.proxy.cut() // a's connection drops, and its reconnects fail
	p.until("worker a sees its delivery of the task closed", func() bool { return !a.store.admit(id) })
	close(proceed)
	p.until("worker b submits its copy", func() bool { return p.sim.Stats().Accepted == 2 })
	p.proxy.refuse(false)
	p.forfeitedOnce(a, b, id, 2)
	if got, want := p.claimsHeard("late-watcher"), []string{"handover handover/" + id}; !slices.Equal(got, want) {
		t.Errorf("claims heard %q, want only a's handover %q", got, want)
	}
}

// TestLateClaimKeepsCopy: as in TestLateClaimDefers, a defers its late
// claim, but here the broker gives the fleet's copy of the task back to
// a itself, between its checkpoint's confirm and its decision (the test
// holds the copy until then, as a consumer of the task queue, and no
// other worker runs). A copy that comes then waits for the decision, and
// a forfeit sends it back to the fleet: a takes it again once it let go
// of the task, as a fresh copy, and polls its own captcha id (its
// handover). One paid solve, one result. Before, the copy was acked on
// arrival (a's checkpoint held the task), then the checkpoint with the
// forfeit: the task was lost.
func TestLateClaimKeepsCopy(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	const id = "late-copy-0001"
	a, proceed := p.submitHeld("copy-a", id)
	holder, err := p.c.Consume(p.ctx, []string{p.c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var once sync.Once
	a.store.afterFirstConfirm = func(string) {
		once.Do(func() {
			_ = holder.Close() // the copy goes back to the queue, and to a
			// Until the copy reached a's store: held there, or acked.
			if !testbound.Eventually(func() bool {
				a.store.mu.Lock()
				e := a.store.entries[id]
				held := e != nil && len(e.deliveries) > 0
				a.store.mu.Unlock()
				qs, err := p.c.Depths(p.ctx, p.c.Names().Tasks)
				return held || err == nil && qs[0].Ready == 0 && unacked(t, p.c.Names().Tasks) == 0
			}) {
				t.Error("the task's copy never reached worker a again")
			}
		})
	}
	p.proxy.refuse(true)
	p.proxy.cut()
	p.until("worker a sees its delivery of the task closed", func() bool { return !a.store.admit(id) })
	close(proceed)
	testbound.Receive(t, "the task's copy, given back by the broker", holder.Deliveries())
	p.until("worker a may no longer claim the task", func() bool {
		a.store.mu.Lock()
		defer a.store.mu.Unlock()
		e := a.store.entries[id]
		if e == nil || !e.deciding || len(e.deliveries) == 0 {
			return false
		}
		return !a.store.mayClaim(e.deliveries[0], time.Now())
	})
	p.proxy.refuse(false)
	got := p.collect(1)
	p.until("worker a let go of the task", func() bool { return a.Held() == 0 })
	p.stop()
	p.solvedOnce(got, id)
	if want := "polling a forfeited task's captcha id instead of submitting its copy"; !strings.Contains(p.logA.String(), want) {
		t.Errorf("worker a's log lacks %q:\n%s", want, p.logA.String())
	}
}

// watchClaims declares a claim queue named after owner, which hears
// every claim and handover from now on (claimsHeard).
func (p *workerPair) watchClaims(owner string) {
	p.t.Helper()
	if err := p.c.DeclareClaims(p.ctx, owner); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = DeleteTopology(context.Background(), p.c.Config(), owner) })
}

// claimsHeard reads, once the workers stopped, what the claim queue of
// watchClaims(owner) heard: "TYPE MESSAGE-ID" each.
func (p *workerPair) claimsHeard(owner string) []string {
	p.t.Helper()
	q := p.c.Names().ClaimQueue(owner)
	qs, err := p.c.Depths(p.ctx, q)
	if err != nil {
		p.t.Fatal(err)
	}
	k, err := p.c.consume(p.ctx, []string{q}, -1, ackAtOnce)
	if err != nil {
		p.t.Fatal(err)
	}
	defer k.Close()
	var heard []string
	for range qs[0].Ready {
		d := testbound.Receive(p.t, "a message the claims watcher heard", k.Deliveries())
		heard = append(heard, d.Type+" "+d.MessageID)
		_ = d.Ack()
	}
	return heard
}

// submitHeld runs worker a (owner) and publishes task id; it returns once
// the provider accepted a's submit, whose answer a waits for until
// proceed closes; a logs to p.logA.
func (p *workerPair) submitHeld(owner, id string) (a *Worker, proceed chan struct{}) {
	submitted, proceed := make(chan struct{}), make(chan struct{})
	p.logA = &testbound.Buffer{}
	a = p.worker(p.cA, &cutAfterSubmit{Client: p.clientA, submitted: submitted, proceed: proceed}, owner,
		slog.New(slog.NewTextHandler(p.logA, nil)))
	p.run(a)
	p.consumers(1)
	p.publish(id)
	p.wait(submitted, "worker a's submit")
	return a, proceed
}

// forfeitedOnce collects task id's one result, waits for workers a and b
// to let go of it, stops them and checks that the provider accepted
// accepted submits, that a forfeited the task, and that no second result
// is left.
func (p *workerPair) forfeitedOnce(a, b *Worker, id string, accepted int64) {
	t := p.t
	t.Helper()
	got := p.collect(1)
	p.until("both workers let go of the task", func() bool { return a.Held() == 0 && b.Held() == 0 })
	p.until("worker a's sweeper read its unsure acks", func() bool {
		a.store.mu.Lock()
		defer a.store.mu.Unlock()
		return len(a.store.unsure) == 0
	})
	p.stop()
	if len(got) != 1 || got[0].ID != id || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want %s solved", got, id)
	}
	if st := p.sim.Stats(); st.Accepted != accepted {
		t.Errorf("the provider accepted %d submits, want %d", st.Accepted, accepted)
	}
	if want := "too long ago to claim it"; !strings.Contains(p.logA.String(), want) {
		t.Errorf("worker a's log lacks %q:\n%s", want, p.logA.String())
	}
	p.noResultsLeft()
}

// claimedOnce collects the pair's one result, waits for worker b to hear
// a's claim on task id (a copy b held waiting is dropped on it; the
// answer may come first), stops the workers and checks that the task was
// solved and paid once, that a's connection dropped, and that no task,
// result or dead letter is left.
func claimedOnce(p *workerPair, id string, b *Worker) {
	t := p.t
	t.Helper()
	got := p.collect(1)
	p.until("worker b to hear a's claim", func() bool {
		b.store.mu.Lock()
		defer b.store.mu.Unlock()
		_, heard := b.store.claims[id]
		return heard
	})
	p.stop()
	if p.cA.Reconnects() == 0 {
		t.Error("worker a's connection never dropped")
	}
	p.solvedOnce(got, id)
}

// solvedOnce checks, once the workers stopped, that got is task id's one
// result, solved, that the provider solved it once, and that no task,
// result or dead letter is left.
func (p *workerPair) solvedOnce(got []captchaq.Result, id string) {
	t := p.t
	t.Helper()
	if len(got) != 1 || got[0].ID != id || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want %s solved once", got, id)
	}
	if st := p.sim.Stats(); st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("the provider accepted %d submits (%d duplicates), want one paid solve", st.Accepted, st.Duplicates)
	}
	p.noResultsLeft()
}

// cutAfterSubmit holds the first submit's answer until proceed closes.
// The queue sends a task checked at its door through SubmitChecked when
// the provider has it (as *provider.Client does), so both ways to submit
// are held: an embedded client's own SubmitChecked would pass the hold by.
type cutAfterSubmit struct {
	*provider.Client
	once               sync.Once
	submitted, proceed chan struct{}
}

func (p *cutAfterSubmit) Submit(ctx context.Context, t provider.Task, pingback string) (string, error) {
	id, err := p.Client.Submit(ctx, t, pingback)
	p.hold()
	return id, err
}

func (p *cutAfterSubmit) SubmitChecked(ctx context.Context, t provider.Checked, pingback string) (string, error) {
	id, err := p.Client.SubmitChecked(ctx, t, pingback)
	p.hold()
	return id, err
}

func (p *cutAfterSubmit) hold() {
	p.once.Do(func() {
		close(p.submitted)
		<-p.proceed
	})
}

// cutProxy forwards TCP connections to the broker; cut drops every one
// open, as a network failure would. Muted, it forwards nothing and
// closes nothing, as a network partition: both sockets stay open and
// only heartbeats can tell. Refusing, it closes each new connection at
// once: a reconnect fails until it stops.
type cutProxy struct {
	url      string
	muted    atomic.Bool
	refusing atomic.Bool
	mu       sync.Mutex
	cs       []net.Conn
}

func newCutProxy(t *testing.T, brokerURL string) *cutProxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	target := u.Host
	u.Host = ln.Addr().String()
	p := &cutProxy{url: u.String()}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			if p.refusing.Load() {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.cs = append(p.cs, in, out)
			p.mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
}

// refuse starts (or stops) closing new connections at once.
func (p *cutProxy) refuse(refusing bool) { p.refusing.Store(refusing) }

// mute stops (or resumes) forwarding without closing anything.
func (p *cutProxy) mute(muted bool) { p.muted.Store(muted) }

// pipe copies src to dst while not muted; when src ends, it closes dst
// unless muted.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			if !p.muted.Load() {
				dst.Close()
			}
			return
		}
		if !p.muted.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// TestAdopterClaims: a worker that adopts a checkpoint (its holder gone)
// claims the task, so a copy of it the broker gave back without its
// captcha id, waiting at another worker for the holder's claim, is
// dropped even when the holder died and cannot claim. Before, a SIGKILL
// between a first checkpoint's confirm and the broker reading the ack of
// the task's delivery had the copy solved again after its wait and the
// task answered twice (TestRecoverySIGKILL beside a loaded machine: 4
// tasks solved and answered twice).
func TestAdopterClaims(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	const watcher = "claims-watcher"
	p.watchClaims(watcher)
	claims, err := p.c.consume(p.ctx, []string{p.c.Names().ClaimQueue(watcher)}, -1, ackAtOnce)
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	b := p.worker(p.cB, p.clientB, "adopter", nil)
	p.run(b)
	p.consumers(1)

	// The dead holder's checkpoint, dead-lettered to the adopt queue: the
	// task at the provider under its captcha id.
	const id = "adopted-0001"
	task := fleetTask(id, 0)
	captchaID, err := p.clientA.Submit(p.ctx, task.ProviderTask(), "")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := TaskMessage{Task: task, CaptchaID: captchaID, Attempts: 1, Submitted: time.Now()}.publishing(p.c.Config().MaxPriority)
	if err != nil {
		t.Fatal(err)
	}
	pub := p.c.NewPublisher()
	defer pub.Close()
	if err := pub.Publish(p.ctx, "", p.c.Names().Adopt, msg); err != nil {
		t.Fatal(err)
	}
	d := testbound.Receive(t, "the adopter's claim", claims.Deliveries())
	if d == nil {
		t.Fatal("the watcher's claims ended without a claim")
	}
	if d.MessageID != id {
		t.Errorf("claim of %q, want %q", d.MessageID, id)
	}
	_ = d.Ack()
	got := p.collect(1)
	p.stop()
	p.solvedOnce(got, id) // the one submit: adopted, polled
}

package amqp

import (
	"context"
	"log/slog"
	"net"
	"net/url"
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
	a.store.hooks.afterFirstConfirm = func(string) {
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
		b.store.holdings.mu.Lock()
		defer b.store.holdings.mu.Unlock()
		_, heard := b.store.holdings.claims[id]
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
// only heartbeats can tell.
type cutProxy struct {
	url   string
	muted atomic.Bool
	mu    sync.Mutex
	cs    []net.Conn
}

func newCutProxy(t *testing.T, brokerURL string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return cutProxyOn(t, ln, brokerURL)
}

// cutProxyOn is a cutProxy forwarding the connections ln accepts; its url
// is brokerURL on ln's address.
func cutProxyOn(t *testing.T, ln net.Listener, brokerURL string) *cutProxy {
	t.Helper()
	t.Cleanup(func() { ln.Close() })
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = ln.Addr().String()
	p := &cutProxy{url: u.String()}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
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
	if err := p.c.DeclareClaims(p.ctx, watcher); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteTopology(context.Background(), p.c.Config(), watcher) })
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

package poller

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// binder answers every id ready but "pending", as 2captcha's res.php
// does: an ids= request with the tokens alone, a poll of one id with its
// token and the user agent ua beside it (none when ua is ""). It counts
// both, but for polls of "pending" alone.
type binder struct {
	ua      string
	cookies map[string]string // by id: a poll of it alone answers them too

	mu         sync.Mutex
	failSingle int // polls of one id still to fail
	bulk       int
	single     []string
}

func (b *binder) Submit(context.Context, provider.Task, string) (string, error) { return "", nil }

func (b *binder) PollMany(_ context.Context, ids []string) ([]provider.PollResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res := make([]provider.PollResult, len(ids))
	if len(ids) > 1 {
		b.bulk++
		for i, id := range ids {
			res[i] = provider.PollResult{ID: id, Ready: id != "pending", Answer: provider.Answer{Raw: "tok-" + id, Token: "tok-" + id}, Bulk: true}
		}
		return res, nil
	}
	if ids[0] == "pending" {
		return res, nil
	}
	b.single = append(b.single, ids[0])
	if b.failSingle > 0 {
		b.failSingle--
		return nil, errors.New("connection reset")
	}
	doc := map[string]string{"request": "tok-" + ids[0]}
	if b.ua != "" {
		doc["useragent"] = b.ua
	}
	if c := b.cookies[ids[0]]; c != "" {
		doc["cookies"] = c
	}
	raw, _ := json.Marshal(doc)
	res[0] = provider.PollResult{ID: ids[0], Ready: true, Answer: provider.Answer{Raw: string(raw), Token: "tok-" + ids[0], JSON: raw}}
	return res, nil
}

// answers records the answers by id and takes each answered id out of
// the poller, as the task table does.
type answers struct {
	sink
	p   *Poller[string]
	mu  sync.Mutex
	got map[string]provider.Answer
}

func (a *answers) Ready(ref, _ string, ans provider.Answer, _, _ time.Time) bool {
	a.mu.Lock()
	a.got[ref] = ans
	a.mu.Unlock()
	a.p.Forget(ref)
	return true
}

// track puts ids of kind k in flight, due at once.
func track(p *Poller[string], k provider.Kind, now time.Time, ids ...string) {
	trackGiven(p, k, now, false, ids...)
}

// trackGiven is track, the tasks given what their answers bind to or not.
func trackGiven(p *Poller[string], k provider.Kind, now time.Time, given bool, ids ...string) {
	for _, id := range ids {
		p.Track(id, id, id, k, now.Add(-time.Minute), time.Time{}, now, true, given)
	}
}

// rounds runs rounds a second apart until p has left in flight, at most
// 10.
func rounds(t *testing.T, p *Poller[string], now time.Time, left int) {
	t.Helper()
	for i := 0; p.Len() > left; i++ {
		if i == 10 {
			t.Fatalf("%d in flight after 10 rounds", p.Len())
		}
		p.round(now.Add(time.Duration(i) * time.Second))
	}
}

// A ready id of a kind whose answer may carry bindings (a Turnstile's user
// agent, a reCAPTCHA v2's cookies), answered by an ids= request with its
// token alone, is polled once more alone in a later round, and its answer
// is that poll's, user agent and all; an image's token is taken from the
// ids= answer. A provider whose polls of one id answer a kind without
// bindings probeMisses times is asked no more for that kind.
func TestBulkAnswersTakeTheirBindings(t *testing.T) {
	const ua = "Mozilla/5.0 (X11; Linux x86_64) SolvedBy/8"
	for _, c := range []struct {
		name  string
		ua    string
		alone int // Turnstiles polled alone of 8, reCAPTCHA v2 of 4
	}{
		{"binds", ua, 8},
		{"binds nothing", "", probeMisses},
	} {
		t.Run(c.name, func(t *testing.T) {
			prov := &binder{ua: c.ua}
			now := time.Now()
			a := &answers{got: map[string]provider.Answer{}}
			p := newPollerOf(prov, a, false, now)
			a.p = p
			track(p, provider.KindTurnstile, now, "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8")
			track(p, provider.KindRecaptchaV2, now, "r1", "r2", "r3", "r4")
			// in flight throughout: every round asks for two ids at least
			track(p, provider.KindImage, now, "i1", "i2", "pending")
			rounds(t, p, now, 1)
			byKind := map[byte]int{}
			for _, id := range prov.single {
				byKind[id[0]]++
			}
			if byKind['t'] != c.alone || byKind['r'] != min(c.alone, 4) || byKind['i'] != 0 || len(prov.single) != len(slices.Compact(slices.Sorted(slices.Values(prov.single)))) {
				t.Errorf("polls of one id %v: want %d Turnstiles, %d reCAPTCHA v2, no image, each once", prov.single, c.alone, min(c.alone, 4))
			}
			if len(a.got) != 14 {
				t.Fatalf("answers for %v, want all 14", slices.Sorted(maps.Keys(a.got)))
			}
			for id, ans := range a.got {
				want := ""
				if slices.Contains(prov.single, id) {
					want = c.ua
				}
				if got := provider.BindingsOf(ans.JSON).UserAgent; ans.Token != "tok-"+id || got != want {
					t.Errorf("%s: token %q, user agent %q; want tok-%s, %q", id, ans.Token, got, id, want)
				}
			}
		})
	}
}

// A poll of one id alone that fails leaves the id waiting: the next
// round polls it alone again, and its answer carries its bindings.
func TestBulkAnswerWithoutBindingsWaitsForAFailedPoll(t *testing.T) {
	const ua = "Mozilla/5.0 (X11; Linux x86_64) SolvedBy/8"
	prov := &binder{ua: ua, failSingle: 1}
	now := time.Now()
	a := &answers{got: map[string]provider.Answer{}}
	p := newPollerOf(prov, a, false, now)
	a.p = p
	track(p, provider.KindTurnstile, now, "t1")
	track(p, provider.KindImage, now, "i1", "pending")
	rounds(t, p, now, 1)
	if !slices.Equal(prov.single, []string{"t1", "t1"}) || len(a.got) != 2 {
		t.Fatalf("polls of one id %v, answers %v; want [t1 t1], t1's and i1's", prov.single, a.got)
	}
	if got := provider.BindingsOf(a.got["t1"].JSON).UserAgent; got != ua {
		t.Errorf("t1's user agent %q, want %q", got, ua)
	}
}

// A task whose poll budget is spent keeps the token an ids= request
// answered: a poll of its id alone would be one too many.
func TestBulkAnswerOnTheLastPollIsTaken(t *testing.T) {
	prov := &binder{ua: "Mozilla/5.0 (X11; Linux x86_64) SolvedBy/8"}
	now := time.Now()
	a := &answers{got: map[string]provider.Answer{}}
	p := newPollerOf(prov, a, false, now)
	a.p = p
	p.cfg.Budget = 1
	track(p, provider.KindTurnstile, now, "t1")
	track(p, provider.KindImage, now, "i1")
	p.round(now)
	if len(prov.single) != 0 || a.got["t1"].Token != "tok-t1" || p.Len() != 0 {
		t.Fatalf("polls of one id %v, answers %v, %d in flight; want none, t1's token, none", prov.single, a.got, p.Len())
	}
}

// A reCAPTCHA v2 given cookies is answered with cookies only then: once
// the polls alone of tasks given none have shown the kind answered
// without bindings probeMisses times, a task given cookies still goes
// alone, and its answer has them; one given none after it is taken from
// the ids= answer.
func TestGivenBindingsGoAlone(t *testing.T) {
	prov := &binder{cookies: map[string]string{"given": "sid=48"}}
	now := time.Now()
	a := &answers{got: map[string]provider.Answer{}}
	p := newPollerOf(prov, a, false, now)
	a.p = p
	track(p, provider.KindRecaptchaV2, now, "r1", "r2", "r3", "r4")
	track(p, provider.KindImage, now, "i1", "pending")
	rounds(t, p, now, 1)
	if len(prov.single) != probeMisses {
		t.Fatalf("polls of one id %v, want %d probes", prov.single, probeMisses)
	}
	later := now.Add(time.Minute)
	trackGiven(p, provider.KindRecaptchaV2, later, true, "given")
	trackGiven(p, provider.KindRecaptchaV2, later, false, "r5")
	track(p, provider.KindImage, later, "i2")
	rounds(t, p, later, 1)
	if n := len(prov.single); n != probeMisses+1 || prov.single[n-1] != "given" || slices.Contains(prov.single, "r5") {
		t.Errorf("polls of one id %v, want the %d probes, then given alone", prov.single, probeMisses)
	}
	if got := string(provider.BindingsOf(a.got["given"].JSON).Cookies); got != `"sid=48"` || a.got["given"].Token != "tok-given" {
		t.Errorf("given: token %q, cookies %q; want tok-given, sid=48", a.got["given"].Token, got)
	}
	if a.got["r5"].Token != "tok-r5" {
		t.Errorf("r5: answer %+v, want tok-r5 from the ids= answer", a.got["r5"])
	}
}

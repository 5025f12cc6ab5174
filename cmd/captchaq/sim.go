package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/bench"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

func init() {
	commands["sim"] = command{summary: "serve a simulated provider on loopback", run: runSim}
}

// simAddrDefault is where `captchaq sim` listens unless told otherwise.
const simAddrDefault = "127.0.0.1:8085"

// envSimAdminKey names the environment variable whose value the /sim/
// endpoints then require as Authorization: Bearer (from the environment,
// so it stays out of ps).
const envSimAdminKey = "CAPTCHAQ_SIM_ADMIN_KEY"

// exposedWarning is what sim says when it listens beyond loopback (base is
// its URL), or "".
func exposedWarning(base string, adminKey bool) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.IsLoopback() {
		return ""
	}
	admin := "/sim/account, /sim/stats/reset and /sim/unban answer anyone: export " + envSimAdminKey + " to require a key there"
	if adminKey {
		admin = "/sim/ needs the admin key from " + envSimAdminKey
	}
	return "captchaq sim: warning: listening on " + u.Host + ", beyond loopback: anyone who reaches it can submit tasks, and it calls their pingback URLs, whatever address they name; " +
		admin + ". Give --addr 127.0.0.1:PORT unless other machines must reach it."
}

// runSim serves a provider simulator until ctx is cancelled (SIGINT or
// SIGTERM). It prints the base URL to stderr once it listens.
func runSim(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("sim")
	f := addSimFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq sim [--addr HOST:PORT] [--threads N] [--latency-scale F] [--mix fast] [flags]\n\nServes in.php, res.php and /sim/stats, /sim/stats/reset, /sim/account, /sim/unban\nuntil interrupted. With "+envSimAdminKey+" set, /sim/ needs it as Authorization: Bearer.\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q: sim takes only flags", fs.Arg(0))}
	}
	cfg, err := f.config(env)
	if err != nil {
		return err
	}
	seeded := false
	fs.Visit(func(fl *flag.Flag) { seeded = seeded || fl.Name == "seed" })
	if !seeded {
		cfg.Seed = rand.Uint64() // ids and tokens differ from run to run, as a provider's do
	}
	log := slog.New(slog.NewTextHandler(env.stderr, nil))
	tlsCfg, err := f.tls.config(ctx, env, *f.addr, log)
	if err != nil {
		return err
	}
	cfg.TLS = tlsCfg
	srv, base, err := sim.Start(cfg, *f.addr)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	keyNote := "any non-empty key"
	if *f.key != "" {
		keyNote = "one key (from --key)"
	}
	priceNote := ""
	if *f.price > 0 {
		priceNote = fmt.Sprintf(", %v per 1,000 solves", *f.price)
	}
	times := "the simulator's own solve times"
	if cfg.Latency != nil {
		times = "the " + *f.mix + " mix's solve times"
	}
	fmt.Fprintf(env.stderr, "captchaq sim: listening on %s (threads %d, %s, latency scale %v, accepts %s%s, seed %d); demo site at %s/demo/\n",
		base, *f.threads, times, *f.scale, keyNote, priceNote, cfg.Seed, base)
	if w := exposedWarning(base, cfg.AdminKey != ""); w != "" {
		fmt.Fprintln(env.stderr, w)
	}
	<-ctx.Done()
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("stopping took over 5 s")
	}
	st := srv.Stats()
	fmt.Fprintf(env.stderr, "captchaq sim: stopped: %d submits accepted, %d solved, %d no-slot answers, utilization %.3f\n",
		st.Accepted, st.Solved, st.NoSlot, st.Utilization)
	return nil
}

// simFlags are sim's flags.
type simFlags struct {
	addr, key, noSlot, methods, mix, userAgent        *string
	threads, banMax                                   *int
	scale, unsolv, f5xx, fDrop, fSlow, balance, price *float64
	instant, noBulk, numeric, banOff                  *bool
	slow, banWin, banFor, ctGap, retained             *time.Duration
	seed                                              *uint64
	tls                                               *tlsFlags
}

func addSimFlags(fs *flag.FlagSet) *simFlags {
	return &simFlags{
		addr:      fs.String("addr", simAddrDefault, "listen address, `host:port` (port 0 picks a free one)"),
		threads:   fs.Int("threads", sim.ThreadsDefault, "plan threads: tasks in progress at once"),
		key:       fs.String("key", "", "the one valid account key (default: any non-empty key)"),
		noSlot:    fs.String("no-slot-answer", sim.NoSlotAnswerDefault, "answer when every thread is busy: ERROR_NO_SLOT_AVAILABLE or ERROR_ZERO_BALANCE"),
		scale:     fs.Float64("latency-scale", sim.LatencyScaleDefault, "multiply every solve time by this `factor` (0.01: a 10 s solve takes 100 ms)"),
		instant:   fs.Bool("instant", false, "solve every task at once"),
		unsolv:    fs.Float64("unsolvable-rate", 0, "share of tasks answered ERROR_CAPTCHA_UNSOLVABLE, 0..1"),
		f5xx:      fs.Float64("fault-5xx", 0, "share of calls answered with an HTML 5xx page, 0..1"),
		fDrop:     fs.Float64("fault-drop", 0, "share of calls whose connection is dropped, 0..1"),
		fSlow:     fs.Float64("fault-slow", 0, "share of calls answered late, 0..1"),
		slow:      fs.Duration("fault-slow-delay", sim.SlowDelayDefault, "delay of a slow answer"),
		noBulk:    fs.Bool("no-bulk", false, "act like a provider without res.php ids= (bulk polling)"),
		numeric:   fs.Bool("numeric-ids", false, "send ids in JSON answers as numbers, not strings"),
		banMax:    fs.Int("poll-ban-max", sim.PollBanMaxDefault, "polls of one id per window before the client's IP is banned"),
		banWin:    fs.Duration("poll-ban-window", sim.PollBanWindowDefault, "poll-ban counting window"),
		banFor:    fs.Duration("poll-ban-duration", sim.PollBanDurationDefault, "how long a poll ban lasts"),
		banOff:    fs.Bool("no-poll-ban", false, "never ban for polling"),
		ctGap:     fs.Duration("task-result-gap", 0, "answer a getTaskResult sooner than this after the task's last one with ERROR_TOO_MUCH_REQUESTS, as CapMonster Cloud does at 2s (default 0: no such rule)"),
		seed:      fs.Uint64("seed", 0, "seed of the random source: same seed, same requests, same ids and tokens (default: a new one each run, printed at start)"),
		balance:   fs.Float64("balance", sim.BalanceDefault, "what getbalance answers"),
		retained:  fs.Duration("result-ttl", sim.ResultTTLDefault, "how long an unfetched answer is kept"),
		methods:   fs.String("methods", "", "comma-separated in.php `methods` served, others refused as unsupported (default: CaptchaAI's: "+strings.Join(provider.CaptchaAIMethods, ",")+"; e.g. hcaptcha,turnstile,userrecaptcha,base64 for a per-solve service)"),
		userAgent: fs.String("user-agent", "", "the browser `user agent` Turnstile and hCaptcha tokens are answered with when a task names none, as 2captcha answers them (default: none, as CaptchaAI)"),
		price:     fs.Float64("price", 0, "per-solve provider: 1,000 solves cost this `much` of --balance (default 0: a thread plan)"),
		tls:       addTLSFlags(fs, "the simulator"),
		mix:       fs.String("mix", "", "solve times of a `NAME`d task mix of captchaq bench ("+strings.Join(bench.MixNames(), ", ")+"; default: the simulator's own, which the realistic and short mixes use)"),
	}
}

// config checks the flags and returns the simulator's Config (TLS aside).
func (f *simFlags) config(env *environment) (sim.Config, error) {
	if *f.threads <= 0 {
		return sim.Config{}, &exitError{code: 2, err: fmt.Errorf("--threads is %d: give a positive thread count", *f.threads)}
	}
	if *f.scale <= 0 && !*f.instant {
		return sim.Config{}, &exitError{code: 2, err: fmt.Errorf("--latency-scale is %v: give a positive factor, or use --instant", *f.scale)}
	}
	latency := bench.MixLatency[*f.mix]
	if _, known := bench.Mixes[*f.mix]; *f.mix != "" && !known {
		return sim.Config{}, &exitError{code: 2, err: fmt.Errorf("--mix %q: use one of %s", *f.mix, strings.Join(bench.MixNames(), ", "))}
	}
	cfg := sim.Config{
		Latency:        latency,
		Threads:        *f.threads,
		Key:            *f.key,
		NoSlotAnswer:   *f.noSlot,
		LatencyScale:   *f.scale,
		Instant:        *f.instant,
		UnsolvableRate: *f.unsolv,
		Faults:         sim.Faults{HTTP5xxRate: *f.f5xx, DropRate: *f.fDrop, SlowRate: *f.fSlow, SlowDelay: *f.slow},
		NoBulk:         *f.noBulk,
		NumericIDs:     *f.numeric,
		PollBan:        sim.PollBan{Disabled: *f.banOff, Max: *f.banMax, Window: *f.banWin, Duration: *f.banFor},
		TaskResultGap:  *f.ctGap,
		Seed:           *f.seed,
		Balance:        *f.balance,
		ResultTTL:      *f.retained,
		PricePer1000:   *f.price,
		UserAgent:      *f.userAgent,
		AdminKey:       env.getenv(envSimAdminKey),
	}
	if *f.methods != "" {
		for _, m := range strings.Split(*f.methods, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(provider.KnownMethods, m) {
				return sim.Config{}, &exitError{code: 2, err: fmt.Errorf("--methods: %q is not a method the simulator knows; use some of %s", m, strings.Join(provider.KnownMethods, ","))}
			}
			cfg.Methods = append(cfg.Methods, m)
		}
	}
	if *f.price < 0 {
		return sim.Config{}, &exitError{code: 2, err: fmt.Errorf("--price is %v: give 0 (a thread plan) or the price of 1,000 solves", *f.price)}
	}
	return cfg, nil
}

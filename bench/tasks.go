package bench

import (
	"encoding/base64"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Share is one kind's part of a task mix.
type Share struct {
	Name   string  // what the report calls it
	Weight float64 // relative share
	task   func(i int) (method string, params map[string]string)
}

// imageBody is a small stand-in image; the simulator does not read pixels.
var imageBody = base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nbench-image"))

// MixRealistic is the mixed workload: mostly images and Turnstile,
// a quarter reCAPTCHA v2, a little v3.
var MixRealistic = []Share{
	{Name: "image", Weight: 0.40, task: func(i int) (string, map[string]string) {
		return "base64", map[string]string{"body": imageBody}
	}},
	{Name: "turnstile", Weight: 0.30, task: func(i int) (string, map[string]string) {
		return "turnstile", map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": fmt.Sprintf("https://shop.example/checkout/%d", i)}
	}},
	{Name: "recaptcha v2", Weight: 0.25, task: func(i int) (string, map[string]string) {
		return "userrecaptcha", map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": fmt.Sprintf("https://forms.example/signup/%d", i)}
	}},
	{Name: "recaptcha v3", Weight: 0.05, task: func(i int) (string, map[string]string) {
		return "userrecaptcha", map[string]string{"version": "v3", "googlekey": "6LfB5_IbAAAAAMCtsjEHEHKqcB9iQocwwxTiihJu", "pageurl": fmt.Sprintf("https://shop.example/login/%d", i), "action": "login", "min_score": "0.3"}
	}},
}

// MixShort is a mix of short tasks: mostly images, some Turnstile and
// reCAPTCHA. On it the seed model keeps the plan's threads busy about half
// of the time, as DESIGN.md reports for the seed's asyncio queue; on
// MixRealistic the seed's 5 s polling wastes less, because reCAPTCHA's long
// solves dominate the thread time.
var MixShort = []Share{
	{Name: "image", Weight: 0.70, task: MixRealistic[0].task},
	{Name: "turnstile", Weight: 0.15, task: MixRealistic[1].task},
	{Name: "recaptcha v2", Weight: 0.10, task: MixRealistic[2].task},
	{Name: "recaptcha v3", Weight: 0.05, task: MixRealistic[3].task},
}

// MixFast is the mix of a fast provider: 30% image, 40% Turnstile, 30%
// reCAPTCHA v2, solved in 0.2–0.5 s, 2–6 s and 5–12 s (MixLatency["fast"]).
// The issue that set the engine's default polling goals measured on it.
var MixFast = []Share{
	{Name: "image", Weight: 0.30, task: MixRealistic[0].task},
	{Name: "turnstile", Weight: 0.40, task: MixRealistic[1].task},
	{Name: "recaptcha v2", Weight: 0.30, task: MixRealistic[2].task},
}

// Mixes are the named mixes of the mixed scenario.
var Mixes = map[string][]Share{"realistic": MixRealistic, "short": MixShort, "fast": MixFast}

// MixLatency are the simulator's solve times of a mix that does not use
// its defaults (at scale 1).
var MixLatency = map[string]map[provider.Kind]sim.Latency{
	"fast": {
		provider.KindImage:       {Median: 320 * time.Millisecond, Spread: 0.25, Min: 200 * time.Millisecond, Max: 500 * time.Millisecond},
		provider.KindTurnstile:   {Median: 3500 * time.Millisecond, Spread: 0.3, Min: 2 * time.Second, Max: 6 * time.Second},
		provider.KindRecaptchaV2: {Median: 8 * time.Second, Spread: 0.25, Min: 5 * time.Second, Max: 12 * time.Second},
	},
}

// MixNames are the keys of Mixes, sorted.
func MixNames() []string { return slices.Sorted(maps.Keys(Mixes)) }

// Tasks returns n tasks in the proportions of mix (largest remainders), in
// an order shuffled by seed: the same n, mix and seed give the same tasks.
func Tasks(n int, mix []Share, seed uint64) []captchaq.Task {
	tasks := make([]captchaq.Task, 0, n)
	for k, c := range shareCounts(n, mix) {
		for range c {
			i := len(tasks)
			method, params := mix[k].task(i)
			tasks = append(tasks, captchaq.Task{ID: fmt.Sprintf("bench-%06d", i), Method: method, Params: params})
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0xbe9c))
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	return tasks
}

// shareCounts splits n among mix by weight; rounding leftovers go to the
// first shares.
func shareCounts(n int, mix []Share) []int {
	var total float64
	for _, s := range mix {
		total += s.Weight
	}
	counts := make([]int, len(mix))
	left := n
	for i, s := range mix {
		counts[i] = int(float64(n) * s.Weight / total)
		left -= counts[i]
	}
	for i := 0; left > 0; i = (i + 1) % len(mix) {
		counts[i]++
		left--
	}
	return counts
}

// MixCounts describes n tasks of mix, as "120 image, 90 turnstile, ...".
func MixCounts(n int, mix []Share) string {
	var parts []string
	for k, c := range shareCounts(n, mix) {
		parts = append(parts, fmt.Sprintf("%d %s", c, mix[k].Name))
	}
	return strings.Join(parts, ", ")
}

package provider

import (
	"strings"
	"testing"
	"time"
)

func TestPlanThreads(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{
		"BASIC": 5, "basic": 5, "Standard": 15, "ADVANCE": 50, "premium": 100, "CORPORATE": 150,
		"ENTERPRISE": 200, "VIP-1": 1000, "vip1": 1000, "VIP_2": 3000, "vip-3": 5000, " VIP-3 ": 5000,
	} {
		got, err := PlanThreads(name)
		if err != nil || got != want {
			t.Errorf("PlanThreads(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	_, err := PlanThreads("GOLD")
	if err == nil || err.Error() != `unknown plan "GOLD": use one of BASIC, STANDARD, ADVANCE, PREMIUM, CORPORATE, ENTERPRISE, VIP-1, VIP-2, VIP-3, or set the thread count directly` {
		t.Errorf("unknown plan: %v", err)
	}
}

func TestLifetimesAndSolveTimes(t *testing.T) {
	t.Parallel()
	life := map[Kind]time.Duration{
		KindRecaptchaV2: 120 * time.Second, KindRecaptchaV3: 120 * time.Second, KindTurnstile: 300 * time.Second,
		KindCloudflareChallenge: 30 * time.Minute, KindGeeTest: 60 * time.Second, KindCaptchaFox: 120 * time.Second,
		KindLemin: 120 * time.Second, KindFriendlyCaptcha: 300 * time.Second,
		KindImage: 0, KindGrid: 0, KindBLS: 0,
		KindHCaptcha: 120 * time.Second, KindFunCaptcha: 60 * time.Second, KindGeeTestV4: 60 * time.Second,
		KindAmazonWAF: 120 * time.Second, KindMTCaptcha: 120 * time.Second, KindDataDome: 30 * time.Minute,
	}
	solve := map[Kind]time.Duration{
		KindImage: 5 * time.Second, KindBLS: 5 * time.Second, KindGrid: 10 * time.Second,
		KindRecaptchaV2: 15 * time.Second, KindRecaptchaV3: 10 * time.Second, KindTurnstile: 10 * time.Second,
		KindGeeTest: 10 * time.Second, KindCloudflareChallenge: 15 * time.Second, KindCaptchaFox: 15 * time.Second,
		KindFriendlyCaptcha: 15 * time.Second, KindLemin: 15 * time.Second,
		KindHCaptcha: 15 * time.Second, KindFunCaptcha: 15 * time.Second, KindGeeTestV4: 10 * time.Second,
		KindAmazonWAF: 15 * time.Second, KindMTCaptcha: 15 * time.Second, KindDataDome: 15 * time.Second,
	}
	median := map[Kind]time.Duration{
		KindImage: 700 * time.Millisecond, KindBLS: 3 * time.Second, KindGrid: 3 * time.Second,
		KindRecaptchaV2: 25 * time.Second, KindRecaptchaV3: 9 * time.Second, KindTurnstile: 8 * time.Second,
		KindGeeTest: 10 * time.Second, KindCloudflareChallenge: 14 * time.Second, KindCaptchaFox: 5 * time.Second,
		KindFriendlyCaptcha: 5 * time.Second, KindLemin: 5 * time.Second,
		KindHCaptcha: 20 * time.Second, KindFunCaptcha: 20 * time.Second, KindGeeTestV4: 10 * time.Second,
		KindAmazonWAF: 10 * time.Second, KindMTCaptcha: 10 * time.Second, KindDataDome: 15 * time.Second,
	}
	for k := range specs { // every supported kind has every value
		if got, want := TokenLifetime(k), life[k]; got != want {
			t.Errorf("TokenLifetime(%s) = %v, want %v", k, got, want)
		}
		if got, want := TypicalSolveTime(k), solve[k]; got != want {
			t.Errorf("TypicalSolveTime(%s) = %v, want %v", k, got, want)
		}
		if got, want := MedianSolveTime(k), median[k]; got != want {
			t.Errorf("MedianSolveTime(%s) = %v, want %v", k, got, want)
		}
	}
	if len(specs) != 17 {
		t.Errorf("%d kinds in the spec table, want 17", len(specs))
	}
	if !strings.Contains(string(KindImage), "image") {
		t.Error("kind names changed")
	}
}

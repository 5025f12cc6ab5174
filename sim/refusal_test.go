package sim_test

import (
	"context"
	"testing"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

// submitter is what both protocols' clients do to send a task.
type submitter interface {
	Submit(ctx context.Context, t provider.Task, pingback string) (string, error)
}

// Each service's refusal of a type it withdrew reaches both protocols'
// clients as a refusal of the type (provider.TypeRefused), and
// Stats.Refused counts it; Withdraw() takes the type again.
func TestRefusalProfiles(t *testing.T) {
	t.Parallel()
	hcaptcha := provider.Task{Method: "hcaptcha", Params: map[string]string{"sitekey": "k", "pageurl": "https://a.example/"}}
	for name, r := range map[string]sim.Refusal{
		"captchaai": sim.RefusalCaptchaAI, "2captcha": sim.Refusal2Captcha, "anticaptcha": sim.RefusalAntiCaptcha,
		"capmonster": sim.RefusalCapMonster, "capsolver": sim.RefusalCapSolver,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sim.Config{Methods: provider.CommonMethods, Refusal: r, Instant: true})
			cfg := provider.ClientConfig{BaseURL: b.base, Key: "k", Methods: provider.CommonMethods}
			in, err := provider.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ct, err := createtask.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			clients := []submitter{in, ct}
			b.srv.Withdraw("hcaptcha")
			for i, c := range clients {
				_, err := c.Submit(t.Context(), hcaptcha, "")
				if !provider.TypeRefused(err) {
					t.Errorf("client %d: %v is not a refusal of the type", i, err)
				}
			}
			if got := b.srv.Stats().Refused; got != 2 {
				t.Errorf("Stats.Refused = %d, want 2", got)
			}
			b.srv.Withdraw()
			for i, c := range clients {
				if _, err := c.Submit(t.Context(), hcaptcha, ""); err != nil {
					t.Errorf("client %d, type taken again: %v", i, err)
				}
			}
		})
	}
}

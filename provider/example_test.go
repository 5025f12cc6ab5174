package provider_test

import (
	"errors"
	"fmt"

	"github.com/captchaq/captchaq/provider"
)

func ExampleTask_Validate() {
	t := provider.Turnstile{SiteKey: "0x4AAAAAAA", PageURL: "shop.example/checkout"}.Task()
	err := t.Validate()
	var ve *provider.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Field)
	fmt.Println(err)

	_, err = provider.Task{Method: "hcaptcha"}.Kind()
	fmt.Println(errors.Is(err, provider.ErrUnsupportedType))
	// Output:
	// true params.pageurl
	// params.pageurl: "shop.example/checkout" has no scheme; add https:// (e.g. https://shop.example/checkout)
	// true
}

func ExampleClassify() {
	err := provider.Classify("submit", "ERROR_NO_SLOT_AVAILABLE", "")
	fmt.Println(err.Class, err.RetryAfter, errors.Is(err, provider.ErrNoSlotAvailable))
	fmt.Println(err)
	// Output:
	// no_slot 5s true
	// submit: ERROR_NO_SLOT_AVAILABLE: every thread of the plan is busy
}

func ExampleRecaptchaV3_Task() {
	t := provider.RecaptchaV3{SiteKey: "6LcR", PageURL: "https://shop.example/", Action: "login", MinScore: 0.3}.Task()
	k, _ := t.Kind()
	fmt.Println(t.Method, k, t.Params["version"], t.Params["min_score"], t.Validate())
	// Output:
	// userrecaptcha recaptcha_v3 v3 0.3 <nil>
}

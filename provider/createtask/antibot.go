package createtask

import "github.com/captchaq/captchaq/provider"

// The bot-protection walls' task families: Amazon WAF (a JSON answer,
// {captcha_voucher, existing_token}), MTCaptcha (a token) and DataDome's
// slider (a cookie bound to the proxy and the user agent, so its only
// type takes a proxy).
var (
	typeAmazonWAF = &taskType{kind: provider.KindAmazonWAF, method: "amazon_waf", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
		{wire: "iv", param: "iv"},
		{wire: "context", param: "context"},
		{wire: "challengeScript", param: "challenge_script"},
		{wire: "captchaScript", param: "captcha_script"},
		fUserAgent,
	}}
	typeMTCaptcha = &taskType{kind: provider.KindMTCaptcha, method: "mt_captcha", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
		fUserAgent,
	}}
	typeDataDome = &taskType{kind: provider.KindDataDome, method: "datadome", proxy: true, fields: []field{
		fWebsiteURL,
		{wire: "captchaUrl", param: "captcha_url"},
		fUserAgent,
	}}
)

// antibotNames are the bot-protection families' type names, in the names
// table's order.
var antibotNames = []typeName{
	{name: "AmazonTaskProxyless", t: typeAmazonWAF},
	{name: "AmazonTask", t: typeAmazonWAF, proxy: true},
	{name: "MtCaptchaTaskProxyless", t: typeMTCaptcha},
	{name: "MtCaptchaTask", t: typeMTCaptcha, proxy: true},
	{name: "DataDomeSliderTask", t: typeDataDome, proxy: true},
}

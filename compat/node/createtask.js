// Drives two npm clients of the JSON createTask protocol against a captchaq
// front, unmodified but for their URL option:
//   - @zennolab_com/capmonstercloud-client (CapMonster Cloud's official
//     client): ClientOptions({ serviceUrl }),
//   - anticaptcha: the client's API object's setBaseURL.
//   CAPTCHAQ_BASE=http://127.0.0.1:8085 CAPTCHAQ_KEY=… node createtask.js
// Prints one JSON line per call ({"client":…,"case":…,"ok":true,"result":…}
// or …"ok":false,"error":…) and exits 1 when any call that should work
// failed.
'use strict';
const { ImageToTextRequest, RecaptchaV2Request, TurnstileRequest } = require('@zennolab_com/capmonstercloud-client');
const { TaskTypes } = require('anticaptcha');
const {
  key, png, capMonster, antiCaptcha, cmcSolver, acSolver, run,
} = require('./ctclients');

const site = { websiteURL: 'https://shop.example/login', turnstileKey: '0x4AAAAAAAC3DHQFLr1GavRN', recaptchaKey: '6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u' };

const cmc = capMonster(key);
const cmcBad = capMonster('not-a-key-' + key);
const cmcSolve = cmcSolver(cmc);
const ac = antiCaptcha(key);
const acBad = antiCaptcha('not-a-key-' + key);
const acSolve = acSolver(ac);

const cases = [
  ['capmonster', 'balance', async () => (await cmc.getBalance()).balance],
  ['capmonster', 'image', () => cmcSolve(new ImageToTextRequest({ body: png, numeric: 1 }))],
  ['capmonster', 'recaptcha', () => cmcSolve(new RecaptchaV2Request({ websiteURL: site.websiteURL, websiteKey: site.recaptchaKey }))],
  ['capmonster', 'turnstile', () => cmcSolve(new TurnstileRequest({ websiteURL: site.websiteURL, websiteKey: site.turnstileKey }))],
  ['capmonster', 'wrong_key', async () => (await cmcBad.getBalance()).balance],
  ['anticaptcha', 'balance', () => ac.getBalance()],
  ['anticaptcha', 'image', async () => (await acSolve({ type: TaskTypes.IMAGE_TO_TEXT, body: png, numeric: 1 })).solution],
  ['anticaptcha', 'recaptcha', async () => (await acSolve({ type: TaskTypes.NOCAPTCHA_PROXYLESS, websiteURL: site.websiteURL, websiteKey: site.recaptchaKey })).solution],
  ['anticaptcha', 'turnstile', async () => (await acSolve({ type: 'TurnstileTaskProxyless', websiteURL: site.websiteURL, websiteKey: site.turnstileKey })).solution],
  ['anticaptcha', 'wrong_key', () => acBad.getBalance()],
];

run(cases, (name) => name !== 'wrong_key');

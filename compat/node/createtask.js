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
const {
  CapMonsterCloudClientFactory, ClientOptions, ImageToTextRequest, RecaptchaV2Request, TurnstileRequest,
} = require('@zennolab_com/capmonstercloud-client');
const { AntiCaptcha, TaskTypes } = require('anticaptcha');

const base = process.env.CAPTCHAQ_BASE;
const key = process.env.CAPTCHAQ_KEY;
if (!base || !key) {
  console.error('set CAPTCHAQ_BASE (the front\'s base URL) and CAPTCHAQ_KEY');
  process.exit(2);
}

// A tiny PNG (1x1); the simulator reads no pixels.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const site = { websiteURL: 'https://shop.example/login', turnstileKey: '0x4AAAAAAAC3DHQFLr1GavRN', recaptchaKey: '6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u' };

const cmc = CapMonsterCloudClientFactory.Create(new ClientOptions({ clientKey: key, serviceUrl: base }));
const cmcBad = CapMonsterCloudClientFactory.Create(new ClientOptions({ clientKey: 'not-a-key-' + key, serviceUrl: base }));

function antiCaptcha(clientKey) {
  const ac = new AntiCaptcha(clientKey);
  ac.api.setBaseURL(base);
  return ac;
}
const ac = antiCaptcha(key);
const acBad = antiCaptcha('not-a-key-' + key);
// getTaskResult(taskId, retries, interval ms): the client's own arguments.
const acSolve = async (task) => ac.getTaskResult(await ac.createTask(task), 600, 100);

// CapMonster's Solve answers {error} or {solution}; an error is a failure.
const cmcSolve = async (req) => {
  const r = await cmc.Solve(req);
  if (r.error) throw new Error(String(r.error));
  return r.solution;
};

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

(async () => {
  let failed = 0;
  for (const [client, name, run] of cases) {
    try {
      const result = await run();
      console.log(JSON.stringify({ client, case: name, ok: true, result }));
    } catch (err) {
      const error = String((err && (err.code || err.errorType)) ? `${err.code || err.errorType}: ${err.message}` : (err && err.message) || err);
      console.log(JSON.stringify({ client, case: name, ok: false, error }));
      if (name !== 'wrong_key') failed++;
    }
  }
  process.exit(failed ? 1 : 0);
})();

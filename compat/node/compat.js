// Drives the official 2captcha npm client against a captchaq front.
//   CAPTCHAQ_BASE=http://127.0.0.1:8085 CAPTCHAQ_KEY=… node compat.js
// The client has no base-URL option: its endpoints are the getters `in`
// and `res`, which a subclass points at the front. Prints one JSON line per
// call ({"case":…,"ok":true,"result":…} or {"case":…,"ok":false,"error":…})
// and exits 1 when any call failed.
'use strict';
const { Solver } = require('@2captcha/captcha-solver');

const base = process.env.CAPTCHAQ_BASE;
const key = process.env.CAPTCHAQ_KEY;
if (!base || !key) {
  console.error('set CAPTCHAQ_BASE (the front\'s base URL) and CAPTCHAQ_KEY');
  process.exit(2);
}

class LocalSolver extends Solver {
  get in() { return base + '/in.php'; }
  get res() { return base + '/res.php'; }
}

// A tiny PNG (1x1); the simulator reads no pixels.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

const solver = new LocalSolver(key, Number(process.env.CAPTCHAQ_POLL_MS || 200));
const bad = new LocalSolver('not-a-key-' + key, 200);

const cases = [
  ['balance', () => solver.balance()],
  ['image', () => solver.imageCaptcha({ body: png, numeric: 4, min_len: 4, max_len: 6 })],
  ['turnstile', () => solver.cloudflareTurnstile({ pageurl: 'https://shop.example/login', sitekey: '0x4AAAAAAAC3DHQFLr1GavRN' })],
  ['recaptcha', () => solver.recaptcha({ pageurl: 'https://shop.example/signup', googlekey: '6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u' })],
  ['geetest', () => solver.geetest({ pageurl: 'https://shop.example/geetest', gt: '81388ea1fc187e0c335c0a8907ff2625', challenge: '2e2f0f65240058b683cb6ea21c303eea' })],
  ['wrong_key', () => bad.balance()],
];

(async () => {
  let failed = 0;
  const ids = {};
  for (const [name, run] of cases) {
    try {
      const result = await run();
      if (result && result.id) ids[name] = result.id;
      console.log(JSON.stringify({ case: name, ok: true, result }));
    } catch (err) {
      console.log(JSON.stringify({ case: name, ok: false, error: String(err && err.err || err && err.message || err) }));
      if (name !== 'wrong_key') failed++;
    }
  }
  for (const [name, report] of [['report_good', () => solver.goodReport(ids.turnstile)], ['report_bad', () => solver.badReport(ids.image)]]) {
    try {
      console.log(JSON.stringify({ case: name, ok: true, result: await report() }));
    } catch (err) {
      console.log(JSON.stringify({ case: name, ok: false, error: String(err && err.err || err && err.message || err) }));
      failed++;
    }
  }
  process.exit(failed ? 1 : 0);
})();

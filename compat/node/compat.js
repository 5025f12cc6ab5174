// Drives the npm clients of the 2captcha protocol, unmodified, against a
// captchaq front (sim, serve or serve --amqp), over http or https:
//
//   CAPTCHAQ_BASE=https://localhost:8443 CAPTCHAQ_KEY=… \
//     NODE_EXTRA_CA_CERTS=…/tls/ca.pem node compat.js [CLIENT…]
//
// Each client is pointed at the front the way its users would (see
// docs/clients.md): the Solver classes by their `in`/`res` getters, the
// others, which have their server's address built in, by redirecting
// their HTTP library's requests to the front. What each sends (methods,
// paths, bodies, headers, chunking) is the client's own.
//
// Prints one JSON line per call:
//   {"client":…,"case":…,"ok":true,"result":{"id":…,"answer":…}}
//   {"client":…,"case":…,"ok":false,"error":"…"}
// and exits 1 when a call that should succeed failed.
'use strict';
const http = require('http');
const https = require('https');

const base = process.env.CAPTCHAQ_BASE;
const key = process.env.CAPTCHAQ_KEY;
const pollMs = Number(process.env.CAPTCHAQ_POLL_MS || 200);
if (!base || !key) {
  console.error('set CAPTCHAQ_BASE (the front\'s base URL) and CAPTCHAQ_KEY');
  process.exit(2);
}
const front = new URL(base);

// A tiny PNG (1x1); the simulator reads no pixels.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const turnstile = { pageurl: 'https://shop.example/login', sitekey: '0x4AAAAAAAC3DHQFLr1GavRN' };
const recaptcha = { pageurl: 'https://shop.example/signup', googlekey: '6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u' };
const geetest = { pageurl: 'https://shop.example/geetest', gt: '81388ea1fc187e0c335c0a8907ff2625', challenge: '2e2f0f65240058b683cb6ea21c303eea' };

// A Solver class pointed at the front by its endpoint getters.
function pointed(Solver) {
  return class extends Solver {
    get in() { return base + '/in.php'; }
    get res() { return base + '/res.php'; }
  };
}

// The Solver API of @2captcha/captcha-solver and 2captcha-ts (one code
// base: one object argument per method).
function solverAPI(pkg) {
  const Solver = pointed(require(pkg).Solver);
  const s = new Solver(key, pollMs);
  const bad = new Solver('not-a-key-' + key, pollMs);
  const solved = (r) => ({ id: r.id, answer: r.data });
  return {
    balance: () => s.balance(),
    image: async () => solved(await s.imageCaptcha({ body: png, numeric: 4, min_len: 4, max_len: 6 })),
    turnstile: async () => solved(await s.cloudflareTurnstile(turnstile)),
    recaptcha: async () => solved(await s.recaptcha(recaptcha)),
    geetest: async () => solved(await s.geetest(geetest)),
    wrong_key: () => bad.balance(),
    report_good: (ids) => s.goodReport(ids.turnstile),
    report_bad: (ids) => s.badReport(ids.image),
  };
}

const clients = {
  '@2captcha/captcha-solver': () => solverAPI('@2captcha/captcha-solver'),
  '2captcha-ts': () => solverAPI('2captcha-ts'),

  // 2captcha 3.0.7: positional arguments; the image goes as a JSON object
  // body that node-fetch sends as text/plain.
  '2captcha': () => {
    const Solver = pointed(require('2captcha').Solver);
    const s = new Solver(key, pollMs);
    const bad = new Solver('not-a-key-' + key, pollMs);
    const solved = (r) => ({ id: r.id, answer: r.data });
    return {
      balance: () => s.balance(),
      image: async () => solved(await s.imageCaptcha(png, { numeric: 4, min_len: 4, max_len: 6 })),
      turnstile: async () => solved(await s.turnstile(turnstile.sitekey, turnstile.pageurl)),
      recaptcha: async () => solved(await s.recaptcha(recaptcha.googlekey, recaptcha.pageurl)),
      geetest: async () => solved(await s.geetest(geetest.gt, geetest.challenge, geetest.pageurl)),
      wrong_key: () => bad.balance(),
      report_good: async (ids) => { await s.goodReport(ids.turnstile); return 'OK_REPORT_RECORDED'; },
      report_bad: async (ids) => { await s.report(ids.image); return 'OK_REPORT_RECORDED'; },
    };
  },

  // @infosimples/node_two_captcha: its URL is built in
  // (https://2captcha.com/<action>.php) and it speaks through axios: an
  // interceptor on that axios sends its requests to the front. Plain-text
  // answers; in.php as an urlencoded POST.
  '@infosimples/node_two_captcha': () => {
    const axios = require(require.resolve('axios', { paths: [require.resolve('@infosimples/node_two_captcha')] }));
    axios.interceptors.request.use((cfg) => {
      cfg.url = cfg.url.replace('https://2captcha.com', base);
      return cfg;
    });
    const Client = require('@infosimples/node_two_captcha');
    const c = new Client(key, { polling: pollMs, throwErrors: true, timeout: 120000 });
    const bad = new Client('not-a-key-' + key, { polling: pollMs, throwErrors: true });
    const solved = (r) => ({ id: r.id, answer: r.text });
    return {
      balance: () => c.balance(),
      image: async () => solved(await c.decode({ base64: png, numeric: 4, min_len: 4, max_len: 6 })),
      recaptcha: async () => solved(await c.decodeRecaptchaV2(recaptcha)),
      wrong_key: () => bad.balance(),
      report_good: async (ids) => ((await c.report(ids.recaptcha, false)) ? 'OK_REPORT_RECORDED' : 'not recorded'),
      report_bad: async (ids) => ((await c.report(ids.image, true)) ? 'OK_REPORT_RECORDED' : 'not recorded'),
    };
  },

  // puppeteer-extra-plugin-recaptcha: its built-in 2captcha provider, as
  // the plugin calls it (getRecaptchaSolutions), with the address it has
  // built in (https://2captcha.com) redirected to the front. It posts
  // in.php urlencoded with no Content-Type, chunked, and polls res.php
  // in plain text.
  'puppeteer-extra-plugin-recaptcha': () => {
    redirect2captcha();
    const plugin = require('puppeteer-extra-plugin-recaptcha')({ provider: { id: '2captcha', token: key } });
    const badPlugin = require('puppeteer-extra-plugin-recaptcha')({ provider: { id: '2captcha', token: 'not-a-key-' + key } });
    const captcha = { _vendor: 'recaptcha', id: 'demo', sitekey: recaptcha.googlekey, url: recaptcha.pageurl };
    const solve = async (p) => {
      const { solutions, error } = await p.getRecaptchaSolutions([captcha]);
      if (error) throw new Error(error.error || JSON.stringify(error));
      return { id: solutions[0].providerCaptchaId, answer: solutions[0].text };
    };
    return {
      recaptcha: () => solve(plugin),
      wrong_key: () => solve(badPlugin),
    };
  },
};

// redirect2captcha sends the requests Node's https module makes to
// 2captcha.com to the front instead (over http.request when the front
// speaks http), leaving the rest of each request as the caller made it.
let redirected = false;
function redirect2captcha() {
  if (redirected) return;
  redirected = true;
  const original = https.request;
  https.request = function (options, ...rest) {
    const host = typeof options === 'object' && !(options instanceof URL) ? (options.hostname || options.host) : null;
    if (host !== '2captcha.com') return original.call(this, options, ...rest);
    const o = { ...options, protocol: front.protocol, hostname: front.hostname, host: front.hostname, port: front.port };
    delete o.href;
    if (front.protocol === 'http:') return http.request(o, ...rest);
    return original.call(this, o, ...rest);
  };
}

// Calls that fail by design.
const mustFail = new Set(['wrong_key']);

(async () => {
  const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(clients);
  let failed = 0;
  for (const name of names) {
    if (!clients[name]) {
      console.error(`unknown client ${name}; one of ${Object.keys(clients).join(', ')}`);
      process.exit(2);
    }
    const api = clients[name]();
    const ids = {};
    for (const [c, run] of Object.entries(api)) {
      try {
        const result = await run(ids);
        if (result && result.id) ids[c] = result.id;
        console.log(JSON.stringify({ client: name, case: c, ok: true, result }));
        if (mustFail.has(c)) failed++;
      } catch (err) {
        const text = String((err && (err.err || err.message)) || err);
        console.log(JSON.stringify({ client: name, case: c, ok: false, error: text }));
        if (!mustFail.has(c)) failed++;
      }
    }
  }
  process.exit(failed ? 1 : 0);
})();

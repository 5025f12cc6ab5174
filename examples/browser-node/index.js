// A browser automation in Node: puppeteer-core drives the system chromium
// (no browser download), the official 2captcha client gets the tokens from
// `captchaq serve`, and the simulator's demo pages check them at siteverify.
//
//   npm ci && node index.js
//
// Environment: SERVE_URL (default http://127.0.0.1:8080), CLIENT_KEY (your
// key in serve's clients file, default qa-client-key), SITE_URL (the demo
// site, a `captchaq sim`, default http://127.0.0.1:8085), CHROME_PATH
// (default /usr/bin/chromium).
//
// Use it on your own sites, or where the site's owner allows such testing.
'use strict';

const puppeteer = require('puppeteer-core');
const { Solver } = require('@2captcha/captcha-solver');

const serveURL = process.env.SERVE_URL || 'http://127.0.0.1:8080';
const siteURL = process.env.SITE_URL || 'http://127.0.0.1:8085';

// The client talks to 2captcha.com; captchaq serve speaks the same
// in.php/res.php, so only the two addresses change.
class CaptchaqSolver extends Solver {
  get in() { return serveURL + '/in.php'; }
  get res() { return serveURL + '/res.php'; }
}

const solver = new CaptchaqSolver(process.env.CLIENT_KEY || 'qa-client-key', 500);

const pages = [
  {
    path: '/demo/turnstile', box: '.cf-turnstile', field: '[name="cf-turnstile-response"]',
    solve: (sitekey, pageurl) => solver.cloudflareTurnstile({ sitekey, pageurl }),
  },
  {
    path: '/demo/recaptcha', box: '.g-recaptcha', field: '[name="g-recaptcha-response"]',
    solve: (sitekey, pageurl) => solver.recaptcha({ googlekey: sitekey, pageurl }),
  },
];

async function main() {
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROME_PATH || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu'],
  });
  let failed = false;
  try {
    const page = await browser.newPage();
    for (const p of pages) {
      await page.goto(siteURL + p.path);
      const sitekey = await page.$eval(p.box, (el) => el.dataset.sitekey);
      // Solve just before submitting: the token's lifetime runs from now.
      const { data: token } = await p.solve(sitekey, page.url());
      await page.$eval(p.field, (el, t) => { el.value = t; }, token);
      await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
      const verdict = await page.$eval('#verdict', (el) => ({ success: el.dataset.success === 'true', title: el.textContent }));
      const codes = await page.$eval('#error-codes', (el) => el.textContent);
      console.log(`${p.path} ${verdict.title} ${codes}`.trim());
      failed = failed || !verdict.success;
    }
  } finally {
    await browser.close();
  }
  if (failed) process.exitCode = 1;
}

main().catch((err) => {
  console.error('browser-node:', err);
  process.exitCode = 1;
});

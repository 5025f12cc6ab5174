// puppeteer-extra-plugin-recaptcha with captchaq serve as its solver.
//
// The plugin finds the reCAPTCHAs on a page, asks a solution provider for
// their tokens and enters them. Its built-in 2captcha provider calls
// https://2captcha.com, which cannot be changed; the plugin's documented
// hook for another solver is provider.fn(captchas, token), which must
// answer { solutions, error }. captchaqSolutions below is that function:
// it submits each reCAPTCHA to captchaq serve's in.php and polls res.php.
//
//   npm ci && node recaptcha-plugin.js
//
// Environment: SERVE_URL (default http://127.0.0.1:8080; an https URL
// works with NODE_EXTRA_CA_CERTS naming the CA captchaq logged), CLIENT_KEY
// (your key in serve's clients file, default qa-client-key), SITE_URL (the
// demo site, a `captchaq sim`, default http://127.0.0.1:8085), CHROME_PATH
// (default /usr/bin/chromium).
//
// Use it on your own sites, or where the site's owner allows such testing.
'use strict';

const { addExtra } = require('puppeteer-extra');
const RecaptchaPlugin = require('puppeteer-extra-plugin-recaptcha');

const serveURL = process.env.SERVE_URL || 'http://127.0.0.1:8080';
const siteURL = process.env.SITE_URL || 'http://127.0.0.1:8085';
const clientKey = process.env.CLIENT_KEY || 'qa-client-key';

// call sends one in.php/res.php request (json=1) and returns its answer.
async function call(path, fields) {
  const body = new URLSearchParams({ key: clientKey, json: '1', ...fields });
  const resp = await fetch(serveURL + path, { method: 'POST', body });
  if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}

// solveOne gets the token of one reCAPTCHA the plugin found.
async function solveOne(captcha) {
  const solution = { _vendor: captcha._vendor, id: captcha.id, provider: 'captchaq', requestAt: new Date() };
  try {
    const fields = { method: 'userrecaptcha', googlekey: captcha.sitekey, pageurl: captcha.url };
    if (captcha.isInvisible) fields.invisible = '1';
    if (captcha.isEnterprise) fields.enterprise = '1';
    if (captcha.s) fields['data-s'] = captcha.s;
    const submitted = await call('/in.php', fields);
    if (submitted.status !== 1) throw new Error(`in.php: ${submitted.request} ${submitted.error_text || ''}`.trim());
    solution.providerCaptchaId = String(submitted.request);
    for (;;) {
      await new Promise((r) => setTimeout(r, 500));
      const got = await call('/res.php', { action: 'get', id: solution.providerCaptchaId });
      if (got.status === 1) {
        solution.text = got.request;
        break;
      }
      if (got.request !== 'CAPCHA_NOT_READY') throw new Error(`res.php: ${got.request} ${got.error_text || ''}`.trim());
    }
    solution.responseAt = new Date();
    solution.hasSolution = true;
    solution.duration = (solution.responseAt - solution.requestAt) / 1000;
  } catch (err) {
    solution.error = String(err);
  }
  return solution;
}

// captchaqSolutions is the plugin's provider.fn.
async function captchaqSolutions(captchas = []) {
  const solutions = await Promise.all(captchas.map(solveOne));
  return { solutions, error: solutions.find((s) => s.error) };
}

async function main() {
  const puppeteer = addExtra(require('puppeteer-core'));
  puppeteer.use(RecaptchaPlugin({ provider: { id: 'captchaq', fn: captchaqSolutions }, visualFeedback: false }));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROME_PATH || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(siteURL + '/demo/recaptcha');
    const { captchas, solved, error } = await page.solveRecaptchas();
    if (error) throw new Error(JSON.stringify(error));
    if (captchas.length !== 1 || !solved.length || !solved[0].isSolved) {
      throw new Error(`found ${captchas.length} reCAPTCHA(s), solved ${JSON.stringify(solved)}`);
    }
    await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
    const verdict = await page.$eval('#verdict', (el) => ({ success: el.dataset.success === 'true', title: el.textContent }));
    const codes = await page.$eval('#error-codes', (el) => el.textContent);
    console.log(`/demo/recaptcha ${verdict.title} ${codes}`.trim());
    if (!verdict.success) process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main().catch((err) => {
  console.error('recaptcha-plugin:', err);
  process.exitCode = 1;
});

// What createtask.js and newtypes.js share: the front's address and key
// from the environment, the createTask clients pointed at it, and the
// loop that runs the cases and prints one JSON line per call.
'use strict';
const { CapMonsterCloudClientFactory, ClientOptions } = require('@zennolab_com/capmonstercloud-client');
const { AntiCaptcha } = require('anticaptcha');

const base = process.env.CAPTCHAQ_BASE;
const key = process.env.CAPTCHAQ_KEY;
if (!base || !key) {
  console.error('set CAPTCHAQ_BASE (the front\'s base URL) and CAPTCHAQ_KEY');
  process.exit(2);
}

// A tiny PNG (1x1); the simulator reads no pixels.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

// CapMonster Cloud's client, by ClientOptions' serviceUrl.
const capMonster = (clientKey) => CapMonsterCloudClientFactory.Create(new ClientOptions({ clientKey, serviceUrl: base }));

// anticaptcha, by its API object's setBaseURL.
function antiCaptcha(clientKey) {
  const ac = new AntiCaptcha(clientKey);
  ac.api.setBaseURL(base);
  return ac;
}

// CapMonster's Solve answers {error} or {solution}; an error is a failure.
const cmcSolver = (cmc) => async (req) => {
  const r = await cmc.Solve(req);
  if (r.error) throw new Error(String(r.error));
  return r.solution;
};

// getTaskResult(taskId, retries, interval ms): the client's own arguments.
const acSolver = (ac) => async (task) => ac.getTaskResult(await ac.createTask(task), 600, 100);

// run calls each [client, name, fn] in turn and prints its outcome; it
// exits 1 when a call failed that expect (by name) wants to succeed.
async function run(cases, expect = () => true) {
  let failed = 0;
  for (const [client, name, fn] of cases) {
    try {
      const result = await fn();
      console.log(JSON.stringify({ client, case: name, ok: true, result }));
    } catch (err) {
      const error = String((err && (err.code || err.errorType)) ? `${err.code || err.errorType}: ${err.message}` : (err && err.message) || err);
      console.log(JSON.stringify({ client, case: name, ok: false, error }));
      if (expect(name)) failed++;
    }
  }
  process.exit(failed ? 1 : 0);
}

module.exports = { base, key, png, capMonster, antiCaptcha, cmcSolver, acSolver, run };

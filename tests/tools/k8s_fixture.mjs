// tests/tools/k8s_fixture.mjs - replays a recorded Kubernetes API conversation over HTTPS
// for tests/e2e/k8s_dispatch.sh (no cluster exists on the test machines).
//
//   node k8s_fixture.mjs --fixture tests/fixtures/k8s/dispatch.json --cert C --key K
//        --token-file F --out DIR --ports FILE
//
// The fixture is a list of phases; each phase lists exchanges: the request ferry must send
// (method, path, the headers that matter, the JSON body in a file, compared as data after
// dropping the fields listed in "ignore") and the canned answer (status, body). Only the
// current phase's exchanges are accepted; "times": "once" (or a number N) exchanges must
// happen exactly once (N times) before the test moves to the next phase, "any" ones any
// number of times (polls); "responses" instead of "response" answers each occurrence in turn.
// Any other request, or one that differs from its recording, is an error: answered 500
// and reported by GET /verify on the control port, which the test asserts is empty.
// "<token>" in an expected header stands for the current content of --token-file (the
// dispatcher must re-read it: the test rotates it). Control port (plain HTTP, loopback):
// POST /phase/NAME, GET /seen, GET /verify. Every POSTed body is saved as DIR/NAME.json.
import { createServer as createHttps } from "node:https";
import { createServer as createHttp } from "node:http";
import { readFileSync, writeFileSync, appendFileSync, renameSync } from "node:fs";
import { dirname, join } from "node:path";
import { isDeepStrictEqual } from "node:util";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const fixture = JSON.parse(readFileSync(args.fixture, "utf8"));
const base = dirname(args.fixture);
const errors = [];
const seen = {}; // "phase/index" -> count
let phase = fixture.phases[0].name;

const load = (file) => JSON.parse(readFileSync(join(base, file), "utf8"));
const phaseOf = (name) => fixture.phases.find((p) => p.name === name);

function strip(obj, paths) {
  const copy = structuredClone(obj);
  for (const p of paths || []) {
    const keys = p.split(".");
    let o = copy;
    for (const k of keys.slice(0, -1)) o = o && typeof o === "object" ? o[k] : undefined;
    if (o && typeof o === "object") delete o[keys[keys.length - 1]];
  }
  return copy;
}

// The first difference between two JSON values, as "path: expected X, got Y".
function firstDiff(want, got, path = "") {
  if (isDeepStrictEqual(want, got)) return null;
  if (want && got && typeof want === "object" && typeof got === "object" && Array.isArray(want) === Array.isArray(got)) {
    for (const k of new Set([...Object.keys(want), ...Object.keys(got)])) {
      const d = firstDiff(want[k], got[k], `${path}.${k}`);
      if (d) return d;
    }
  }
  return `${path || "."}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
}

function check(ex, req, body) {
  const problems = [];
  for (const [h, v] of Object.entries(ex.request.headers || {})) {
    let want = v;
    if (want.includes("<token>")) want = want.replace("<token>", readFileSync(args["token-file"], "utf8").trim());
    const got = req.headers[h.toLowerCase()];
    if (got !== want) problems.push(`header ${h}: expected ${h.toLowerCase() === "authorization" ? "the current token" : JSON.stringify(want)}, got ${got === undefined ? "none" : h.toLowerCase() === "authorization" ? "another value" : JSON.stringify(got)}`);
  }
  if (ex.request.body_file || ex.request.body) {
    let parsed;
    try {
      parsed = JSON.parse(body);
    } catch {
      problems.push(`body is not JSON: ${body.slice(0, 200)}`);
    }
    if (parsed !== undefined) {
      const want = ex.request.body_file ? load(ex.request.body_file) : ex.request.body;
      const d = firstDiff(strip(want, ex.request.ignore), strip(parsed, ex.request.ignore));
      if (d) problems.push(`body differs from the recording at ${d}`);
    }
  }
  return problems;
}

function fail(res, msg) {
  errors.push(msg);
  console.error("k8s fixture: " + msg);
  res.writeHead(500, { "content-type": "application/json" });
  res.end(JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", message: "fixture: " + msg, code: 500 }));
}

function api(req, res) {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const line = `${req.method} ${req.url}`;
    appendFileSync(join(args.out, "requests.log"), `${phase} ${line}\n`);
    const p = phaseOf(phase);
    const idx = p.exchanges.findIndex((ex) => ex.request.method === req.method && ex.request.path === req.url);
    if (idx < 0) return fail(res, `phase ${phase}: unexpected request ${line}`);
    const ex = p.exchanges[idx];
    const key = `${phase}/${idx}`;
    seen[key] = (seen[key] || 0) + 1;
    const limit = ex.times === "once" ? 1 : typeof ex.times === "number" ? ex.times : Infinity;
    if (seen[key] > limit) return fail(res, `phase ${phase}: ${line} sent ${seen[key]} times, recorded ${limit}`);
    const problems = check(ex, req, body);
    if (problems.length) return fail(res, `phase ${phase}: ${line}: ${problems.join("; ")}`);
    if (req.method === "POST") {
      const name = JSON.parse(body)?.metadata?.name || "unnamed";
      writeFileSync(join(args.out, `${name}.json`), body);
    }
    // "responses": one answer per occurrence (a 503, then the success), the last repeated.
    const resp = ex.responses ? ex.responses[Math.min(seen[key], ex.responses.length) - 1] : ex.response;
    const out = resp.body_file ? load(resp.body_file) : resp.body;
    res.writeHead(resp.status, { "content-type": "application/json" });
    res.end(JSON.stringify(out));
  });
}

function missing(name) {
  const p = phaseOf(name);
  return p.exchanges
    .map((ex, i) => [ex, i])
    .filter(([ex, i]) => (ex.times === "once" || typeof ex.times === "number") && (seen[`${name}/${i}`] || 0) < (ex.times === "once" ? 1 : ex.times))
    .map(([ex, i]) => `phase ${name}: ${ex.request.method} ${ex.request.path} sent ${seen[`${name}/${i}`] || 0} times, recorded ${ex.times}`);
}

function control(req, res) {
  const reply = (code, obj) => {
    res.writeHead(code, { "content-type": "application/json" });
    res.end(JSON.stringify(obj));
  };
  const m = req.url.match(/^\/phase\/(.+)$/);
  if (req.method === "POST" && m) {
    if (!phaseOf(m[1])) return reply(404, { error: `no phase ${m[1]}` });
    const left = missing(phase);
    errors.push(...left);
    phase = m[1];
    return reply(200, { phase, missing: left });
  }
  if (req.url === "/seen") {
    const counts = {};
    for (const [k, n] of Object.entries(seen)) {
      const [ph, i] = k.split("/");
      const ex = phaseOf(ph).exchanges[Number(i)];
      counts[`${ph} ${ex.request.method} ${ex.request.path}`] = n;
    }
    return reply(200, { phase, counts });
  }
  if (req.url === "/verify") return reply(200, { phase, errors: [...errors, ...missing(phase)] });
  reply(404, {});
}

const https = createHttps({ cert: readFileSync(args.cert), key: readFileSync(args.key) }, api);
const http = createHttp(control);
https.listen(0, "127.0.0.1", () => {
  http.listen(0, "127.0.0.1", () => {
    // written whole, then renamed: the test reads the file as soon as it is there
    writeFileSync(args.ports + ".tmp", `${https.address().port} ${http.address().port}\n`);
    renameSync(args.ports + ".tmp", args.ports);
  });
});
process.on("SIGTERM", () => process.exit(0));

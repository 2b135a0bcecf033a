// tests/tools/validate_k8s.mjs - validates Kubernetes manifests (YAML, several documents per
// file, or JSON) against the Kubernetes API's OpenAPI schemas, with the `kubernetes-models`
// npm package (each model's validate() checks the object against its schema, offline).
//
//   node validate_k8s.mjs FILE...    prints one line per object, exits 1 on any invalid one
//
// Used by tests/e2e/k8s_manifests.sh (deploy/kubernetes/*.yaml, the recorded Job bodies)
// and tests/e2e/k8s_dispatch.sh (the Job bodies ferry actually sent).
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// apiVersion -> module folder of kubernetes-models ("apps/v1" -> "apps/v1", "v1" -> "v1",
// "rbac.authorization.k8s.io/v1" -> "rbac.authorization.k8s.io/v1").
async function modelFor(apiVersion, kind) {
  try {
    const mod = await import(`kubernetes-models/${apiVersion}/${kind}`);
    return mod[kind] || mod.default;
  } catch {
    return null;
  }
}

// What the schemas leave to the API server's own validation: names and labels.
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_NAMED = new Set(["Job", "Service", "Namespace", "StatefulSet", "Deployment", "Pod"]);
function apiChecks(o) {
  const problems = [];
  const name = o.metadata?.name;
  if (typeof name !== "string") problems.push("metadata.name missing");
  else if (LABEL_NAMED.has(o.kind) ? !(DNS_LABEL.test(name) && name.length <= 63) : !(DNS_SUBDOMAIN.test(name) && name.length <= 253))
    problems.push(`metadata.name "${name}" is not a valid DNS-1123 name for a ${o.kind}`);
  const labelSets = [o.metadata?.labels, o.spec?.template?.metadata?.labels, o.spec?.selector?.matchLabels, o.spec?.jobTemplate?.spec?.template?.metadata?.labels];
  for (const ls of labelSets)
    for (const [k, v] of Object.entries(ls || {})) {
      const [prefix, key] = k.includes("/") ? k.split("/") : [null, k];
      if ((prefix !== null && !DNS_SUBDOMAIN.test(prefix)) || !LABEL_VALUE.test(key) || !key || key.length > 63)
        problems.push(`label key "${k}" invalid`);
      if (typeof v !== "string" || !LABEL_VALUE.test(v) || v.length > 63) problems.push(`label ${k}: value ${JSON.stringify(v)} invalid`);
    }
  const sel = o.spec?.selector?.matchLabels, tl = o.spec?.template?.metadata?.labels;
  if (sel && tl)
    for (const [k, v] of Object.entries(sel)) if (tl[k] !== v) problems.push(`selector ${k}=${v} does not match the pod template's labels`);
  return problems;
}

let bad = 0, good = 0;
for (const file of process.argv.slice(2)) {
  const text = readFileSync(file, "utf8");
  let objects;
  if (file.endsWith(".json")) {
    objects = [JSON.parse(text)];
  } else {
    const docs = parseAllDocuments(text);
    objects = [];
    for (const d of docs) {
      if (d.errors.length) {
        console.log(`${file}: YAML error: ${d.errors[0].message}`);
        bad++;
        continue;
      }
      const o = d.toJS();
      if (o !== null && o !== undefined) objects.push(o);
    }
  }
  for (const o of objects) {
    const what = `${file}: ${o?.kind}/${o?.metadata?.name}`;
    if (!o || typeof o !== "object" || !o.apiVersion || !o.kind) {
      console.log(`${what}: not a Kubernetes object (no apiVersion/kind)`);
      bad++;
      continue;
    }
    if (o.apiVersion === "kustomize.config.k8s.io/v1beta1") {
      good++; // not an API object: kustomize reads it
      continue;
    }
    const Model = await modelFor(o.apiVersion, o.kind);
    if (!Model) {
      console.log(`${what}: unknown apiVersion/kind ${o.apiVersion} ${o.kind}`);
      bad++;
      continue;
    }
    try {
      new Model(o).validate();
      const problems = apiChecks(o);
      if (problems.length) throw new Error(problems.join("; "));
      console.log(`${what}: valid`);
      good++;
    } catch (e) {
      console.log(`${what}: INVALID: ${e.message}`);
      bad++;
    }
  }
}
console.log(`${good} valid, ${bad} invalid`);
process.exit(bad || good === 0 ? 1 : 0);

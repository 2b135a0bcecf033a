#!/usr/bin/env bash
# The Kubernetes manifests (deploy/kubernetes/) and the Job bodies of the dispatcher's
# recorded conversation (tests/fixtures/k8s/job-*.json, which k8s_dispatch.sh proves are
# what ferry sends) validated offline against the Kubernetes API schemas with the
# `kubernetes-models` npm package (tests/tools/validate_k8s.mjs; no cluster here), plus
# the checks the schemas leave to the API server: DNS-1123 names, label syntax, selectors
# matching their pod templates. Also: kustomization.yaml lists every manifest, the RBAC
# Role grants exactly what the dispatcher calls, no password is written in a pod spec, and
# the validator refuses broken objects (so a pass means something).
. "$(dirname "$0")/lib.sh"

command -v node > /dev/null || fail "node is needed"
TOOLS="$FERRY_SRC/tests/tools"
[ -d "$TOOLS/node_modules/kubernetes-models" ] || fail "run: npm ci --prefix tests/tools"
K="$FERRY_SRC/deploy/kubernetes"
validate() { node "$TOOLS/validate_k8s.mjs" "$@"; }

# ---- every manifest and every recorded Job body ----
validate "$K"/*.yaml "$FERRY_SRC"/tests/fixtures/k8s/job-*.json > out.txt || fail "invalid: $(grep -v ': valid$' out.txt)"
n=$(grep -c ': valid$' out.txt)
for kind in Namespace/ferry ServiceAccount/ferry-control Role/ferry-dispatcher RoleBinding/ferry-dispatcher \
  Secret/ferry ConfigMap/ferry-pipelines Deployment/ferry-api Service/ferry-api Deployment/ferry-control \
  Deployment/ferry-worker StatefulSet/postgres Service/postgres StatefulSet/nats Service/nats Job/ferry-run-2-1; do
  grep -q ": $kind: valid$" out.txt || fail "$kind missing or invalid: $(cat out.txt)"
done
pass "$n objects valid against the Kubernetes API schemas (manifests and recorded Jobs)"

# ---- the recorded API answers are real shapes: every Job in them (created, listed, read,
# deleted) is a valid Job ----
jq -c '[.phases[].exchanges[].response.body | if .kind == "JobList" then .items[] else . end
        | select(.kind == "Job")] | to_entries[] | .value' "$FERRY_SRC/tests/fixtures/k8s/dispatch.json" \
  | split -l 1 --additional-suffix=.json - answer-
validate answer-*.json > answers.out || fail "recorded answers: $(grep -v ': valid$' answers.out)"
[ "$(grep -c ': valid$' answers.out)" -ge 10 ] || fail "too few Jobs in the recorded answers: $(cat answers.out)"
pass "$(grep -c ': valid$' answers.out) Jobs in the recorded API answers are valid"

# ---- the validator can fail ----
jq '.spec.backoffLimit = "0"' "$FERRY_SRC/tests/fixtures/k8s/job-run-1-1.json" > bad1.json
jq '.spec.template.spec.containers[0].resources.requests.cpu = "half a core"' \
  "$FERRY_SRC/tests/fixtures/k8s/job-run-1-1.json" > bad2.json
jq '.metadata.name = "Ferry_Run_1"' "$FERRY_SRC/tests/fixtures/k8s/job-run-1-1.json" > bad3.json
sed 's/replicas: 3/replicas: three/' "$K/worker.yaml" > bad4.yaml
for f in bad1.json bad2.json bad3.json bad4.yaml; do
  validate "$f" > bad.out && fail "the validator accepted $f: $(cat bad.out)"
  grep -q INVALID bad.out || fail "no INVALID line for $f: $(cat bad.out)"
done
pass "the validator refuses a string backoffLimit, a bad quantity, a bad name, a bad replica count"

# ---- kustomization lists every manifest (and nothing missing) ----
python3 - "$K" <<'EOF' || fail "kustomization.yaml and the folder differ"
import os, sys, re
k = sys.argv[1]
text = open(os.path.join(k, "kustomization.yaml")).read()
listed = set(re.findall(r"^\s*-\s*([\w.-]+\.yaml)\s*$", text, re.M))
files = {f for f in os.listdir(k) if f.endswith(".yaml") and f != "kustomization.yaml"}
if listed != files:
    print("listed only:", sorted(listed - files), "not listed:", sorted(files - listed))
    sys.exit(1)
EOF
pass "kustomization.yaml lists every manifest"

# ---- RBAC: the dispatcher's calls, nothing else; secrets only by reference ----
# (run from tests/tools, where the `yaml` package resolves)
(cd "$TOOLS" && node --input-type=module - "$K") <<'EOF' || fail "RBAC or secret references"
import { readFileSync, readdirSync } from "node:fs";
import { parseAllDocuments } from "yaml";
const dir = process.argv[2];
const objs = readdirSync(dir).filter((f) => f.endsWith(".yaml"))
  .flatMap((f) => parseAllDocuments(readFileSync(`${dir}/${f}`, "utf8")).map((d) => d.toJS()).filter(Boolean));
const role = objs.find((o) => o.kind === "Role" && o.metadata.name === "ferry-dispatcher");
const rules = JSON.stringify(role.rules);
const want = JSON.stringify([{ apiGroups: ["batch"], resources: ["jobs"], verbs: ["create", "get", "list", "watch", "delete"] }]);
if (rules !== want) { console.log("Role rules:", rules); process.exit(1); }
const rb = objs.find((o) => o.kind === "RoleBinding");
if (rb.subjects[0].name !== "ferry-control") { console.log("bound to", rb.subjects[0].name); process.exit(1); }
const ctl = objs.find((o) => o.kind === "Deployment" && o.metadata.name === "ferry-control");
if (ctl.spec.template.spec.serviceAccountName !== "ferry-control") { console.log("control SA"); process.exit(1); }
if (ctl.spec.replicas !== 2) { console.log("control replicas", ctl.spec.replicas); process.exit(1); }
for (const o of objs.filter((o) => o.spec?.template?.spec)) {
  const pod = o.spec.template.spec;
  for (const c of pod.containers) {
    for (const e of c.env || [])
      if (/STORE|BUS|TOKEN|PASSWORD/.test(e.name) && e.value !== undefined) { console.log(`${o.metadata.name}: ${e.name} written in clear`); process.exit(1); }
    if (c.securityContext?.allowPrivilegeEscalation !== false) { console.log(`${o.metadata.name}: privilege escalation`); process.exit(1); }
    if (!(pod.securityContext?.runAsNonRoot)) { console.log(`${o.metadata.name}: may run as root`); process.exit(1); }
  }
  if (o.metadata.name !== "ferry-control" && pod.automountServiceAccountToken !== false) { console.log(`${o.metadata.name}: mounts an API token`); process.exit(1); }
}
const api = objs.find((o) => o.kind === "Deployment" && o.metadata.name === "ferry-api").spec.template.spec.containers[0];
if (api.readinessProbe.httpGet.path !== "/readyz" || api.livenessProbe.httpGet.path !== "/livez") { console.log("api probes"); process.exit(1); }
EOF
pass "Role grants jobs create/get/list/watch/delete to ferry-control only; no secret in clear; non-root; probes on /readyz, /livez"

# ---- the probes name paths the server really answers ----
"$FERRY_BIN" serve --routes | grep -q '^GET /readyz public' || fail "the server has no public /readyz: $("$FERRY_BIN" serve --routes)"
"$FERRY_BIN" serve --routes | grep -q '^GET /livez public' || fail "the server has no public /livez"
pass "/readyz and /livez are public routes of ferry serve"

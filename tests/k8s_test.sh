#!/usr/bin/env bash
# The Kubernetes manifests (deploy/k8s): renders every kustomization with
# `kubectl kustomize`, then tests/k8s/validate.js checks every object
# against the Kubernetes OpenAPI schema (npm kubernetes-models, unknown
# fields included), every flag a container passes to a bertps binary against
# that binary's --helpfull, and the deployment rules (resources, non-root,
# read-only root, probes, references, JobSpec sizes vs replicas, Secret
# volume modes, NetworkPolicy selectors and port names). Negative
# cases: an overlay with deliberately broken objects must fail, naming each
# problem.
#
#   k8s_test.sh COORDINATOR SERVER WORKER BERTPSCTL PROBE VALIDATE_JS
#
# Needs kubectl (with kustomize v5; skipped without it) and the validator of tools/get_data.sh
# k8s_validator: from $BERTPS_DATA_DIR, else the data/ dir of the workspace
# this test lives in.
set -euo pipefail
COORDINATOR="$1" SERVER="$2" WORKER="$3" CTL="$4" PROBE="$5" VALIDATE="$6"
work="${TEST_TMPDIR:-$(mktemp -d)}/k8s_test"
rm -rf "$work"
mkdir -p "$work/flags" "$work/rendered"
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ -z "${BERTPS_DATA_DIR:-}" ]; then
  # The test script in the runfiles is a symlink into the workspace.
  root="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
  BERTPS_DATA_DIR="$root/data"
fi
modules="$BERTPS_DATA_DIR/node/k8s-validator/node_modules"
[ -f "$modules/kubernetes-models/package.json" ] ||
    fail "$modules is missing: run tools/get_data.sh k8s_validator first (or set BERTPS_DATA_DIR)"
command -v node >/dev/null || fail "node is not installed"
# Debian 12 packages no kubectl with kustomize v5: without one the test is
# reported skipped (tools/test_summary.sh allows this skip, and only this).
skip() {
  echo "SKIP: $*"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" skipped="1"><testsuite name="tests/k8s_test" tests="1" skipped="1">
<testcase name="tests/k8s_test" status="run" result="skipped"><skipped message="$*"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}
command -v kubectl >/dev/null || skip "kubectl is not installed (kubectl kustomize renders the manifests)"
kversion=$(kubectl version --client 2>/dev/null | tr '\n' ' ')
grep -q 'Kustomize Version: v[5-9]' <<<"$kversion" || skip "kubectl has no kustomize v5 ($kversion)"
echo "kubectl: $kversion"

# ------------------------------------------------- the binaries' flags
helpfull_flags() {  # absl: "    --name (help); default: ..." (exits 1)
  { "$1" --helpfull 2>&1 || true; } | sed -n 's/^ *--\([A-Za-z0-9_]*\) .*/\1/p' | sort -u
}
helpfull_flags "$COORDINATOR" >"$work/flags/bertps_coordinator.flags"
helpfull_flags "$SERVER" >"$work/flags/bertps_server.flags"
helpfull_flags "$WORKER" >"$work/flags/bertps_worker.flags"
helpfull_flags "$PROBE" >"$work/flags/bertps_probe.flags"
# bertpsctl parses its own command line; --help lists its flags.
{ "$CTL" --help 2>&1 || true; } | grep -o -- '--[a-z][a-z0-9_]*' | sed 's/^--//' |
    sort -u >"$work/flags/bertpsctl.flags"
for b in bertps_coordinator bertps_server bertps_worker bertps_probe bertpsctl; do
  grep -qxE 'coordinator|port|addr' "$work/flags/$b.flags" ||
      fail "$b: none of --coordinator, --port, --addr among its flags: did the help output change?"
  echo "$b: $(wc -l <"$work/flags/$b.flags") flags"
done

# ------------------------------------------------------------- render
# A dereferenced copy: kustomize refuses files outside a kustomization's
# root, and the runfiles are symlinks.
runfiles="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-bertps}"
if [ -d "$runfiles/deploy/k8s" ]; then
  cp -rL "$runfiles/deploy/k8s" "$work/k8s"
else
  cp -rL "$(dirname "$(readlink -f "$0")")/../deploy/k8s" "$work/k8s"
fi
validate() { NODE_PATH="$modules" node "$VALIDATE" --flags "$work/flags" "$@"; }

rendered=()
while IFS= read -r k; do
  dir="$(dirname "$k")"
  name="${dir#"$work/k8s/"}"
  out="$work/rendered/${name//\//_}.yaml"
  kubectl kustomize "$dir" >"$out" 2>"$out.err" ||
      fail "kubectl kustomize $name: $(cat "$out.err")"
  echo "rendered $name: $(grep -c '^kind:' "$out") objects"
  rendered+=("$out")
done < <(find "$work/k8s" -name kustomization.yaml | sort)
[ "${#rendered[@]}" -ge 2 ] || fail "expected the base and at least one overlay"

validate "${rendered[@]}" "$work/k8s/secret.example.yaml" ||
    fail "the manifests are not valid (see above)"

# The base pins the image to the release (VERSION), never a moving tag.
if [ -f "$runfiles/VERSION" ]; then version=$(head -n1 "$runfiles/VERSION")
else version=$(head -n1 "$(dirname "$(readlink -f "$0")")/../VERSION"); fi
base="$work/rendered/base.yaml"
[ -f "$base" ] || fail "no rendered base"
images=$(grep -o 'image: .*' "$base" | sort -u)
[ "$images" = "image: bertps:$version" ] || fail "the base's images are not bertps:$version: $images"
# The coordinator's SQLite store is on its own ReadWriteOnce volume; the
# shards have a disruption budget; the coordinator a startup probe.
/usr/bin/python3 - "$base" <<'PY' || fail "deployment rules (see above)"
import sys
text = open(sys.argv[1]).read()
docs = text.split("\n---\n")
def doc(kind, name):
    for d in docs:
        if f"kind: {kind}\n" in d and f"\n  name: {name}\n" in d:
            return d
    raise SystemExit(f"no {kind} {name}")
pvc = doc("PersistentVolumeClaim", "bertps-coordinator-state")
assert "ReadWriteOnce" in pvc and "ReadWriteMany" not in pvc, pvc
coord = doc("Deployment", "bertps-coordinator")
assert "--state_db=/var/lib/bertps-state/" in coord, "state_db not on the state volume"
assert "claimName: bertps-coordinator-state" in coord
assert "startupProbe:" in coord
pdb = doc("PodDisruptionBudget", "bertps-ps")
assert "maxUnavailable: 1" in pdb, pdb
# The train workers: a pool that can be scaled, one pod disrupted at a time,
# daemons that stay for the next job.
train = doc("Deployment", "bertps-train")
assert "--exit_when_job_ends" not in train, "a pool's pods must not exit with the job"
assert "maxUnavailable: 1" in doc("PodDisruptionBudget", "bertps-train")
PY
echo "base: image bertps:$version; coordinator state on a ReadWriteOnce volume; shard and train disruption budgets; train workers a scalable pool"

# ----------------------------------------------------- negative cases
# Each broken object must be refused, and the report must name it.
mkdir -p "$work/k8s/overlays/broken"
cat >"$work/k8s/overlays/broken/kustomization.yaml" <<'YAML'
resources:
  - ../local
  - extra.yaml
patches:
  - path: typo.yaml
  - target: {kind: StatefulSet, name: bertps-ps}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --no_such_flag=1
      - op: replace
        path: /spec/replicas
        value: "two"
  - target: {kind: Deployment, name: bertps-train}
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 0
      - op: remove
        path: /spec/template/spec/containers/0/resources/limits
  - target: {kind: Deployment, name: bertps-eval}
    patch: |-
      - op: replace
        path: /spec/template/spec/volumes/1/secret/defaultMode
        value: 420
YAML
cat >"$work/k8s/overlays/broken/typo.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: bertps-coordinator
spec:
  replica: 2
  template:
    spec:
      containers:
        - name: coordinator
          imagePullPolicy: IfNotPresent
          comand: ["bertps_coordinator"]
YAML
cat >"$work/k8s/overlays/broken/extra.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deploymnet
metadata:
  name: misspelt-kind
---
apiVersion: v1
kind: Service
metadata:
  name: nobody
spec:
  selector:
    app.kubernetes.io/name: no-such-pod
  ports:
    - port: 80
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: selects-nothing
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/name: no-such-pod
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: unknown-port
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/name: bertps-ps
  ingress:
    - ports:
        - port: no-such-port
YAML
kubectl kustomize "$work/k8s/overlays/broken" >"$work/broken.yaml" ||
    fail "kubectl kustomize of the broken overlay failed"
if validate "$work/broken.yaml" >"$work/broken.out" 2>&1; then
  cat "$work/broken.out"
  fail "the broken manifests were accepted"
fi
expect() {
  grep -qF -- "$1" "$work/broken.out" || {
    cat "$work/broken.out"
    fail "the broken manifests' report does not say: $1"
  }
  echo "refused as expected: $1"
}
expect "Deployment/bertps-coordinator: schema: unknown field /spec/replica"
expect "StatefulSet/bertps-ps: schema: data/spec/replicas must be integer"
expect "bertps_server has no flag --no_such_flag"
expect "no Kubernetes schema for apps/v1 Deploymnet"
expect "Service/nobody: selector"
expect "container worker: no resources.limits.cpu"
expect "Deployment/bertps-train: replicas 0 < the JobSpec's min_workers 1"
expect "Deployment/bertps-eval: volume secrets: Secret mode 0644 allows more than 0440"
expect "NetworkPolicy/selects-nothing: podSelector"
expect "NetworkPolicy/unknown-port: port no-such-port: no pod it selects"
# The unknown container field, with the StatefulSet's schema error fixed.
sed -i 's/value: "two"/value: 2/' "$work/k8s/overlays/broken/kustomization.yaml"
kubectl kustomize "$work/k8s/overlays/broken" >"$work/broken.yaml"
validate "$work/broken.yaml" >"$work/broken.out" 2>&1 || true
expect "unknown field /spec/template/spec/containers/0/comand"

echo "PASS: ${#rendered[@]} kustomizations valid; broken objects refused"

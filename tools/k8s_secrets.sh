#!/usr/bin/env bash
# The Kubernetes Secrets of bertps, one per role, from the files of
# tools/gen_certs.sh (or a real CA's files under the same names):
#
#   tools/k8s_secrets.sh DIR | kubectl -n NAMESPACE apply --server-side -f -
#
# Prints four Secret manifests (YAML, values base64 in `data:`):
#   bertps-coordinator-secrets  ca.crt server.crt server.key auth_tokens
#                               capability.key
#   bertps-ps-secrets           ca.crt server.crt server.key auth_tokens
#                               (its worker lines only) worker.token
#   bertps-worker-secrets       ca.crt worker.crt worker.key worker.token
#   bertps-client-secrets       ca.crt client.crt client.key admin.token
# The shards accept only worker tokens (nothing calls them with an admin
# token), so the admin token reaches the coordinator's token list and the
# client Secret only. deploy/k8s/secret.example.yaml shows the same shapes;
# docs/deploy.md says which pod mounts which.
#
# Pipe the output to kubectl: written to a file, it holds every key in
# clear (base64). --server-side keeps the values out of the
# last-applied-configuration annotation that a client-side apply adds.
set -euo pipefail
if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: $0 DIR   (DIR: the output of tools/gen_certs.sh)" >&2
  exit 2
fi
dir="$1"
for f in ca.crt server.crt server.key worker.crt worker.key client.crt \
         client.key auth_tokens worker.token admin.token capability.key; do
  [[ -s "$dir/$f" ]] || {
    echo "k8s_secrets.sh: $dir/$f is missing or empty (run tools/gen_certs.sh $dir first)" >&2
    exit 1
  }
done
worker_lines=$(grep -E '^[[:space:]]*worker[[:space:]]' "$dir/auth_tokens" || true)
[[ -n "$worker_lines" ]] || {
  echo "k8s_secrets.sh: $dir/auth_tokens has no worker token" >&2
  exit 1
}
grep -qE '^[[:space:]]*admin[[:space:]]' "$dir/auth_tokens" || {
  echo "k8s_secrets.sh: $dir/auth_tokens has no admin token" >&2
  exit 1
}

b64() { base64 -w0; }

# secret NAME COMPONENT KEY=SOURCE...: one Secret; SOURCE is a file of DIR,
# or "-worker-tokens" for the worker lines of auth_tokens.
secret() {
  local name="$1" component="$2"
  shift 2
  printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n'
  printf '  name: %s\n  labels:\n' "$name"
  printf '    app.kubernetes.io/part-of: bertps\n'
  printf '    app.kubernetes.io/component: %s\n' "$component"
  printf 'type: Opaque\ndata:\n'
  local kv key src
  for kv in "$@"; do
    key="${kv%%=*}" src="${kv#*=}"
    if [[ "$src" == -worker-tokens ]]; then
      printf '  %s: %s\n' "$key" "$(printf '%s\n' "$worker_lines" | b64)"
    else
      printf '  %s: %s\n' "$key" "$(b64 < "$dir/$src")"
    fi
  done
}

secret bertps-coordinator-secrets coordinator \
  ca.crt=ca.crt server.crt=server.crt server.key=server.key \
  auth_tokens=auth_tokens capability.key=capability.key
secret bertps-ps-secrets parameter-server \
  ca.crt=ca.crt server.crt=server.crt server.key=server.key \
  auth_tokens=-worker-tokens worker.token=worker.token
secret bertps-worker-secrets worker \
  ca.crt=ca.crt worker.crt=worker.crt worker.key=worker.key \
  worker.token=worker.token
secret bertps-client-secrets client \
  ca.crt=ca.crt client.crt=client.crt client.key=client.key \
  admin.token=admin.token

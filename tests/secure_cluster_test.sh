#!/usr/bin/env bash
# Real processes over 127.0.0.1 with mutual TLS and bearer tokens on every
# service (docs/security.md): a coordinator, one parameter-server shard and
# one train worker, with material from tools/gen_certs.sh. bertpsctl without
# TLS, without a token, with a worker token, or without a client certificate
# is refused and creates no job; with the admin token and a client
# certificate a tiny job runs to SUCCEEDED.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"; GEN_CERTS="$6"
work="${TEST_TMPDIR:-$(mktemp -d)}/secure"
mkdir -p "$work/data"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

s="$work/secrets"
"$GEN_CERTS" "$s" > /dev/null
for f in ca.crt server.key client.key auth_tokens worker.token admin.token; do
  [ "$(stat -c %a "$s/$f")" = 600 ] || fail "$f is not mode 0600"
done
"$GEN_CERTS" "$s" | grep -q "up to date" || fail "gen_certs.sh is not idempotent"

cat > "$work/model.json" <<'JSON'
{"vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128}
JSON
"$BERT_LOCAL" synthetic-data --config "$work/model.json" --out "$work/data" --steps 8 > /dev/null

# Every server: its certificate, mutual TLS, the accepted tokens. Daemons
# that dial out also carry the worker token (and present their certificate).
serve=(--tls_ca "$s/ca.crt" --tls_cert "$s/server.crt" --tls_key "$s/server.key"
       --tls_require_client_cert --auth_tokens_file "$s/auth_tokens")
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
coord="127.0.0.1:$port"
# A capability key that is not an Ed25519 key is refused at start.
if "$COORD" --port 0 "${serve[@]}" --capability_key "$s/server.key" > "$work/badkey.out" 2>&1; then
  fail "coordinator started with a capability key that is not Ed25519"
fi
grep -q "capability_key" "$work/badkey.out" || fail "bad capability key: $(cat "$work/badkey.out")"
"$COORD" --port "$port" --metrics_port 0 --member_timeout_s 5 "${serve[@]}" \
  --capability_key "$s/capability.key" > "$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do grep -q listening "$work/coordinator.log" 2>/dev/null && break; sleep 0.05; done
"$SERVER" --coordinator "$coord" --port 0 "${serve[@]}" --token_file "$s/worker.token" \
  > "$work/ps.log" 2>&1 &
pids+=($!)
"$WORKER" --role=train --coordinator "$coord" --tls_ca "$s/ca.crt" \
  --tls_cert "$s/client.crt" --tls_key "$s/client.key" --token_file "$s/worker.token" \
  > "$work/worker.log" 2>&1 &
pids+=($!)
export BERTPS_COORDINATOR="$coord"

# A server that has the CA but no certificate would listen in plaintext.
if "$COORD" --port 0 --tls_ca "$s/ca.crt" > "$work/nocert.out" 2>&1; then
  fail "coordinator started without a certificate"
fi
grep -q "plaintext" "$work/nocert.out" || fail "no-certificate: $(cat "$work/nocert.out")"

cat > "$work/job.pbtxt" <<EOF2
name: "secure"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 4
steps: 6
num_ps_shards: 1
num_workers: 1
optimizer { learning_rate: 2e-3 }
EOF2
client=(--tls_ca "$s/ca.crt" --tls_cert "$s/client.crt" --tls_key "$s/client.key")

refused() {  # refused EXPECTED_TEXT bertpsctl-args...
  local want="$1"; shift
  if "$CTL" --timeout_s 5 "$@" > "$work/refused.out" 2>&1; then
    fail "accepted: bertpsctl $*"
  fi
  grep -q "$want" "$work/refused.out" || fail "bertpsctl $*: expected '$want': $(cat "$work/refused.out")"
}
# Plaintext against the TLS coordinator.
refused "UNAVAILABLE" list
# TLS, but no client certificate (mutual TLS).
refused "UNAVAILABLE" \
  --tls_ca "$s/ca.crt" --token_file "$s/admin.token" submit "$work/job.pbtxt"
# No token.
refused "UNAUTHENTICATED" "${client[@]}" submit "$work/job.pbtxt"
refused "UNAUTHENTICATED" "${client[@]}" list
# A worker token may not submit.
refused "PERMISSION_DENIED.*admin" "${client[@]}" --token_file "$s/worker.token" submit "$work/job.pbtxt"
# A worker token reads no job it is not a member of.
refused "PERMISSION_DENIED.*worker token sees only" "${client[@]}" --token_file "$s/worker.token" list
# Nothing of that created a job.
"$CTL" "${client[@]}" --token_file "$s/admin.token" list > "$work/list0.out" \
  || fail "list with the admin token: $(cat "$work/list0.out")"
if grep -q "job-" "$work/list0.out"; then fail "a refused submit created a job: $(cat "$work/list0.out")"; fi

admin=("${client[@]}" --token_file "$s/admin.token")
job=$("$CTL" "${admin[@]}" submit "$work/job.pbtxt") || fail "admin submit: $job"
echo "submitted $job"
timeout 300 "$CTL" "${admin[@]}" watch "$job" > "$work/watch.out" 2>&1 \
  || fail "watch: $(tail -3 "$work/watch.out")"
refused "PERMISSION_DENIED" "${client[@]}" --token_file "$s/worker.token" status "$job"
"$CTL" "${admin[@]}" status "$job" > "$work/status.out" \
  || fail "status with the admin token"
grep -q SUCCEEDED "$work/status.out" || fail "job did not succeed: $(cat "$work/status.out")"
if "$CTL" "${client[@]}" --token_file "$s/worker.token" cancel "$job" > "$work/cancel.out" 2>&1; then
  fail "a worker token cancelled a job"
fi
grep -q "PERMISSION_DENIED" "$work/cancel.out" || fail "cancel with a worker token: $(cat "$work/cancel.out")"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
echo "secure cluster: refused plaintext, no-certificate, no-token and worker-token clients; job $job SUCCEEDED over mutual TLS"
echo PASS

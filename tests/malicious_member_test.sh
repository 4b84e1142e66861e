#!/usr/bin/env bash
# A member holding a valid worker credential (the worker token every daemon
# has, a client certificate, a member id and credential of its own), and
# another team's admin, try each attack an outside review showed working, against real processes over
# mutual TLS with tokens and confined paths (docs/security.md "What a worker
# token may do"). tools/hostile_member speaks the services directly. Each
# attack is refused (PERMISSION_DENIED) and changes nothing: the victim train
# job keeps its incarnation, slot holder and state and ends with the same
# parameters, bit for bit, as the same job run with no attack; the other
# jobs' state and counts stay as they were; no file is written where an
# attack asked.
#
#   malicious_member_test.sh BERT_LOCAL COORD SERVER WORKER CTL GEN_CERTS HOSTILE_MEMBER
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"; GEN_CERTS="$6"
HM="$7"
source "$(dirname "$0")/process_lib.sh"
init_work malicious
in="$work/in" out="$work/out"
mkdir -p "$in/data" "$out"
s="$work/secrets"
"$GEN_CERTS" "$s" > /dev/null
# Another team's admin (docs/security.md "Teams"): a real admin identity,
# of the team "intruders", which owns none of the jobs below.
intruder_token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "admin $intruder_token intruders" >> "$s/auth_tokens"
echo "$intruder_token" > "$s/intruder.token"; chmod 600 "$s/intruder.token"

cat > "$in/model.json" <<'JSON'
{"vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128}
JSON
"$BERT_LOCAL" synthetic-data --config "$in/model.json" --out "$in/data" --steps 20 > /dev/null
for f in a b c; do printf 'Some text for item %s.\nAnother sentence here.\n' "$f" > "$in/pre-$f.txt"; done
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nsome\ntext\n' > "$in/vocab.txt"

serve=(--tls_ca "$s/ca.crt" --tls_cert "$s/server.crt" --tls_key "$s/server.key"
       --tls_require_client_cert --auth_tokens_file "$s/auth_tokens")
client=(--tls_ca "$s/ca.crt" --tls_cert "$s/client.crt" --tls_key "$s/client.key")
admin=("${client[@]}" --token_file "$s/admin.token")
worker=("${client[@]}" --token_file "$s/worker.token")
start_coordinator "$COORD" 0 "$work/coordinator.log" "${serve[@]}" \
  --member_timeout_s 60 --data_root "$in" --output_root "$out"
coord="$BERTPS_COORDINATOR"
"$SERVER" --coordinator "$coord" --port 0 --address_file "$work/ps.address" \
  "${serve[@]}" --token_file "$s/worker.token" > "$work/ps.log" 2>&1 &
pids+=($!)
# The train worker stops itself (SIGSTOP) before the step of version 6 of
# the first job: the attacks run while the victim job is in the middle.
BERTPS_PAUSE_AT="train_step:6:0" "$WORKER" --role=train --coordinator "$coord" \
  "${worker[@]}" > "$work/w.log" 2>&1 &
wpid=$!; pids+=($wpid)
for _ in $(seq 1 200); do [ -s "$work/ps.address" ] && break; sleep 0.05; done
shard=$(cat "$work/ps.address")
ctl() { "$CTL" --coordinator "$coord" "${admin[@]}" "$@"; }
sfield() { ctl status "$1" --json | /usr/bin/python3 -c "import json,sys; s=json.load(sys.stdin); print($2)"; }
hm() { "$HM" "${worker[@]}" "$@" 2>>"$work/hostile.err"; }
# expect_refused WHAT OUTPUT: the attack's outcome is PERMISSION_DENIED.
refusals=0
expect_refused() {
  case "$2" in
    PERMISSION_DENIED:*) refusals=$((refusals + 1)); echo "refused: $1";;
    *) fail "not refused: $1: $2";;
  esac
}

train_spec() {  # NAME: the victim's spec (and the reference run's)
  cat <<EOF2
name: "$1"
task: PRETRAIN
model: "$in/model.json"
data: "$in/data/*.tfrecord"
batch_size: 8
steps: 12
num_ps_shards: 1
num_workers: 1
optimizer { learning_rate: 2e-3 warmup_steps: 2 }
checkpoint { dir: "$out/$1/ckpt" every_steps: 4 }
export_path: "$out/$1.safetensors"
EOF2
}
pre_spec() {  # NAME INPUT
  cat <<EOF2
name: "$1"
task: PREPROCESS
data: "$2"
output_dir: "$out/$1"
preprocess { vocab: "$in/vocab.txt" }
EOF2
}
train_spec victim > "$work/victim.pbtxt"
victim=$(ctl submit "$work/victim.pbtxt") || fail "submit victim"
for _ in $(seq 1 600); do grep -q "pause point train_step of version 6 reached" "$work/w.log" && break; sleep 0.1; done
grep -q "pause point train_step of version 6 reached" "$work/w.log" || fail "the worker did not pause"
inc=$(sfield "$victim" 's["incarnation"]')
holder=$(sfield "$victim" 's["slots"][0]["member"]')
step=$(sfield "$victim" 's["progress"].get("step", 0)')
echo "victim $victim paused at step $step (incarnation $inc, worker $holder)"

# Three preprocess jobs; the attacker registers as a preprocess member and
# is leased an item of the first.
for j in a b c; do pre_spec "pre-$j" "$in/pre-$j.txt" > "$work/pre-$j.pbtxt"; done
pa=$(ctl submit "$work/pre-a.pbtxt"); pb=$(ctl submit "$work/pre-b.pbtxt"); pc=$(ctl submit "$work/pre-c.pbtxt")
reg=$(hm --coordinator "$coord" register --role PREPROCESS_ROLE)
case "$reg" in OK\ *) ;; *) fail "the attacker could not register: $reg";; esac
read -r _ me secret <<< "$reg"
lease=$(hm --coordinator "$coord" heartbeat --member "$me" --secret "$secret")
case "$lease" in "OK job=$pa item=0"*) ;; *) fail "the attacker's lease: $lease";; esac
for j in "$pb" "$pc"; do
  [ "$(sfield "$j" 's["state"]')" = RUNNING ] || fail "$j is not running: the attack would prove nothing"
done

# 1. Forged pool results: a success for B, an error for C.
expect_refused "a result for another job's item" \
  "$(hm --coordinator "$coord" heartbeat --member "$me" --secret "$secret" --job "$pb" --result 0:999)"
expect_refused "an error for another job's item" \
  "$(hm --coordinator "$coord" heartbeat --member "$me" --secret "$secret" --job "$pc" --result "0:0:forged by $me")"
# 2. Forged heartbeats: the victim's worker's id, without its credential
#    (none, the attacker's own, a guess).
for sec in "" "$secret" "0000"; do
  expect_refused "a leave for the victim's worker (credential '${sec:0:4}')" \
    "$(hm --coordinator "$coord" heartbeat --member "$holder" --secret "$sec" --job "$victim" --incarnation "$inc" --leaving)"
  expect_refused "an error for the victim's worker" \
    "$(hm --coordinator "$coord" heartbeat --member "$holder" --secret "$sec" --job "$victim" --incarnation "$inc" --error forged)"
  expect_refused "a checkpoint for the victim's worker" \
    "$(hm --coordinator "$coord" heartbeat --member "$holder" --secret "$sec" --job "$victim" --incarnation "$inc" --checkpoint /etc/hostname)"
done
# 3. A registration as a shard at the live shard's address.
expect_refused "a shard registered at $shard" \
  "$(hm --coordinator "$coord" register --role PS --address "$shard" --instance forged)"
expect_refused "a shard registered at $shard without an instance" \
  "$(hm --coordinator "$coord" register --role PS --address "$shard")"
# 4. The victim's shard, driven without the job's key.
scope=(--shard "$shard" --job "$victim" --incarnation "$inc")
expect_refused "a checkpoint into $out/evil" "$(hm "${scope[@]}" checkpoint --dir "$out/evil")"
expect_refused "a checkpoint into /tmp (no job named)" "$(hm --shard "$shard" checkpoint --dir "$work/evil2")"
expect_refused "a restore of /etc/hostname" "$(hm "${scope[@]}" restore --manifest /etc/hostname)"
expect_refused "a restore of a missing file" "$(hm "${scope[@]}" restore --manifest /etc/no-such-file)"
expect_refused "a replicated step" "$(hm "${scope[@]}" replicate)"
expect_refused "a snapshot" "$(hm "${scope[@]}" snapshot)"
expect_refused "an exchange" "$(hm "${scope[@]}" exchange)"
expect_refused "shard stats" "$(hm "${scope[@]}" stats)"
expect_refused "shard stats with a guessed key" "$(hm "${scope[@]}" --job_key guessed stats)"
# 5. Other jobs' status.
expect_refused "list with the worker token" "$(hm --coordinator "$coord" list)"
expect_refused "the victim's status" "$(hm --coordinator "$coord" get --job "$victim")"
expect_refused "the victim's status with the attacker's credential" \
  "$(hm --coordinator "$coord" get --job "$victim" --member "$me" --secret "$secret")"
expect_refused "the victim's events" "$(hm --coordinator "$coord" watch --job "$victim" --member "$me" --secret "$secret")"
own=$(hm --coordinator "$coord" get --job "$pa" --member "$me" --secret "$secret")
[ "$own" = "OK RUNNING" ] || fail "the attacker cannot read its own job: $own"
listed=$(hm --coordinator "$coord" list --member "$me" --secret "$secret")
[ "$listed" = "OK 1 jobs" ] || fail "the attacker's list: $listed"

# 6. Another team's admin: the victim is, for it, a job that does not
#    exist; it cannot cancel it, drain or revoke its worker, and lists none.
intruder() { "$CTL" --coordinator "$coord" "${client[@]}" --token_file "$s/intruder.token" "$@" 2>&1; }
expect_not_found() {
  case "$2" in
    *NOT_FOUND*|*"no job"*) refusals=$((refusals + 1)); echo "refused: $1";;
    *) fail "not refused: $1: $2";;
  esac
}
expect_not_found "another team's admin reads the victim" "$(intruder status "$victim" || true)"
expect_not_found "another team's admin cancels the victim" "$(intruder cancel "$victim" || true)"
case "$(intruder drain "$holder" || true)" in
  *PERMISSION_DENIED*|*"cluster admin"*) refusals=$((refusals + 1)); echo "refused: another team's admin drains the victim's worker";;
  *) fail "not refused: another team's admin drains the victim's worker";;
esac
case "$(intruder revoke "$holder" || true)" in
  *PERMISSION_DENIED*|*"cluster admin"*) refusals=$((refusals + 1)); echo "refused: another team's admin revokes the victim's worker";;
  *) fail "not refused: another team's admin revokes the victim's worker";;
esac
listed=$(intruder list) || fail "another team's admin cannot list its own (none): $listed"
case "$listed" in *"$victim"*|*"$pa"*) fail "another team's admin lists others' jobs: $listed";; esac

# Nothing changed.
[ "$(sfield "$pb" 's["state"]')" = RUNNING ] || fail "job B: $(sfield "$pb" 's["state"]')"
[ "$(sfield "$pb" 's.get("records_written", 0)')" = 0 ] || fail "job B counted forged records"
[ "$(sfield "$pc" 's["state"]')" = RUNNING ] || fail "job C: $(sfield "$pc" 's["state"]')"
[ "$(sfield "$victim" 's["state"]')" = RUNNING ] || fail "victim: $(sfield "$victim" 's["state"]')"
[ "$(sfield "$victim" 's["incarnation"]')" = "$inc" ] || fail "the victim was restarted"
[ "$(sfield "$victim" 's["slots"][0]["member"]')" = "$holder" ] || fail "the victim's slot moved"
[ "$(sfield "$victim" 's.get("last_checkpoint", "")')" != /etc/hostname ] || fail "forged checkpoint taken"
[ ! -e "$out/evil" ] && [ ! -e "$work/evil2" ] || fail "an attack wrote a checkpoint"
[ "$(sfield "$victim" 's.get("restarts", 0)')" = 0 ] || fail "the victim restarted (its shard evicted?)"

# The victim goes on to the end; the same job run with no attack gives the
# same parameters bit for bit.
kill -CONT "$wpid"
timeout 120 "$CTL" --coordinator "$coord" "${admin[@]}" watch "$victim" > "$work/victim.watch" 2>&1 \
  || fail "victim: $(tail -3 "$work/victim.watch")"
[ "$(sfield "$victim" 's["state"]')" = SUCCEEDED ] || fail "victim: $(sfield "$victim" 's["state"]')"
for j in "$pa" "$pb" "$pc"; do ctl cancel "$j" > /dev/null; done
train_spec reference > "$work/reference.pbtxt"
reference=$(ctl submit "$work/reference.pbtxt") || fail "submit reference"
timeout 120 "$CTL" --coordinator "$coord" "${admin[@]}" watch "$reference" > "$work/reference.watch" 2>&1 \
  || fail "reference: $(tail -3 "$work/reference.watch")"
expect_same_parameters "$out/victim.safetensors" "$out/reference.safetensors" \
  "victim (attacked while paused) vs reference"
echo "malicious member: $refusals attacks refused, nothing changed"
echo PASS

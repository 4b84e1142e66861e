#!/usr/bin/env bash
# Development TLS material and bearer tokens for bertps, made with openssl.
#
#   tools/gen_certs.sh DIR [NAME ...]
#
# Writes into DIR (created with mode 0700; every file mode 0600):
#   ca.crt ca.key          a development CA (EC P-256, 10 years)
#   server.crt server.key  signed by the CA; SAN: localhost, 127.0.0.1 and each
#                          NAME (an IPv4/IPv6 address becomes an IP entry,
#                          anything else a DNS entry, e.g. Kubernetes service
#                          names or "*.bertps-ps.default.svc"); usable for
#                          serving and as a client certificate (mutual TLS)
#   worker.crt worker.key  for worker daemons: their client certificate, and
#                          the server certificate of their health port under
#                          the DNS name bertps-worker only (CN bertps-worker),
#                          so a worker cannot pose as the coordinator or a shard
#   client.crt client.key  a client-only certificate (CN bertps-client)
#   auth_tokens            "worker TOKEN" and "admin TOKEN" lines (--auth_tokens_file)
#   worker.token admin.token  the same tokens, one per file (--token_file)
#   capability.key         the coordinator's Ed25519 key that signs the members'
#                          capabilities (bertps_coordinator --capability_key)
# Idempotent: existing files are kept; the server certificate is made again
# only when the requested names change (the CA and tokens stay).
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: $0 DIR [NAME ...]" >&2
  exit 2
fi
dir="$1"; shift
command -v openssl > /dev/null || { echo "gen_certs.sh: openssl not found" >&2; exit 1; }
umask 077
mkdir -p "$dir"
chmod 0700 "$dir"
cd "$dir"

san="DNS:localhost,IP:127.0.0.1"
for n in "$@"; do
  if [[ "$n" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || "$n" == *:* ]]; then
    san="$san,IP:$n"
  else
    san="$san,DNS:$n"
  fi
done

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2> /dev/null; }

# sign NAME CN EXTENSIONS: NAME.key + NAME.crt signed by the CA.
sign() {
  local name="$1" cn="$2" ext="$3"
  newkey "$name.key"
  openssl req -new -key "$name.key" -subj "/O=bertps/CN=$cn" -out "$name.csr"
  printf '%s\n' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 825 -sha256 -extfile "$name.ext" -out "$name.crt.tmp" 2> /dev/null
  mv "$name.crt.tmp" "$name.crt"
  rm -f "$name.csr" "$name.ext"
}

made=()
if [[ ! -s ca.crt || ! -s ca.key ]]; then
  newkey ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 \
    -subj "/O=bertps/CN=bertps development CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.crt
  rm -f server.crt worker.crt client.crt server.san  # signed by a previous CA
  made+=(ca.crt)
fi
if [[ ! -s server.crt || ! -s server.key || "$(cat server.san 2> /dev/null)" != "$san" ]]; then
  sign server bertps-server "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san"
  printf '%s' "$san" > server.san
  made+=(server.crt)
fi
if [[ ! -s worker.crt || ! -s worker.key ]]; then
  sign worker bertps-worker "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:bertps-worker"
  made+=(worker.crt)
fi
if [[ ! -s client.crt || ! -s client.key ]]; then
  sign client bertps-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  made+=(client.crt)
fi
if [[ ! -s worker.token || ! -s admin.token || ! -s auth_tokens ]]; then
  openssl rand -hex 32 > worker.token
  openssl rand -hex 32 > admin.token
  { echo "# ROLE TOKEN (bertps --auth_tokens_file)"
    echo "worker $(cat worker.token)"
    echo "admin $(cat admin.token)"; } > auth_tokens
  made+=(tokens)
fi
if [[ ! -s capability.key ]]; then
  openssl genpkey -algorithm ed25519 -out capability.key 2>/dev/null
  made+=(capability.key)
fi
rm -f ca.srl
chmod 0600 capability.key ca.crt ca.key server.crt server.key server.san worker.crt worker.key \
  client.crt client.key \
  auth_tokens worker.token admin.token
if [[ ${#made[@]} -gt 0 ]]; then
  echo "gen_certs.sh: wrote ${made[*]} in $dir (server SAN $san)"
else
  echo "gen_certs.sh: $dir is up to date"
fi

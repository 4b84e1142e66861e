// Validates rendered Kubernetes manifests (multi-document YAML files, e.g.
// the output of `kubectl kustomize`) for tests/k8s_test.sh:
//
//   node validate.js --flags DIR FILE.yaml...
//
// 1. Schema: every object against the Kubernetes OpenAPI schema, with the
//    validators of npm kubernetes-models (types, required fields, formats).
//    Unknown fields (a typo such as `replica:`) are errors too, as with
//    `kubectl apply --validate=strict`: while an object is validated, every
//    property the schema's validator reads is recorded; an object property
//    that it never read is not in the schema.
// 2. Flags: every bertps binary started by a container (command/args, exec
//    probes, `sh -c` scripts) is given only flags it has. DIR holds one file
//    per binary, NAME.flags, one flag name per line (from its --helpfull).
// 3. Deployment rules: resources requests and limits, non-root, read-only
//    root file system, no privilege escalation, probes on long-running
//    containers, and references (ConfigMaps, PVCs, Services) that resolve
//    within the rendered set (the role Secrets bertps-*-secrets are made
//    apart: tools/k8s_secrets.sh), Secret volumes without write or world
//    bits, NetworkPolicies that select pods and name ports they have.
//
// Prints one line per object and one per problem; exits 1 on any problem.
"use strict";
const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");

const EXTERNAL_SECRETS = new Set([
  "bertps-coordinator-secrets", "bertps-ps-secrets", "bertps-worker-secrets",
  "bertps-client-secrets",
]);
const BINARIES = ["bertps_server", "bertps_coordinator", "bertps_worker",
                  "bertpsctl", "bertps_probe"];

function usage() {
  console.error("usage: node validate.js --flags DIR FILE.yaml...");
  process.exit(2);
}

const argv = process.argv.slice(2);
let flagsDir = null;
const files = [];
for (let i = 0; i < argv.length; ++i) {
  if (argv[i] === "--flags") flagsDir = argv[++i];
  else files.push(argv[i]);
}
if (!flagsDir || files.length === 0) usage();

const flagsOf = {};
for (const b of BINARIES) {
  const f = path.join(flagsDir, b + ".flags");
  if (!fs.existsSync(f)) continue;
  flagsOf[b] = new Set(fs.readFileSync(f, "utf8").split("\n").filter(Boolean));
}

let problems = 0;
function problem(where, msg) {
  ++problems;
  console.log(`FAIL ${where}: ${msg}`);
}

// ------------------------------------------------------------------ schema

function modelFor(apiVersion, kind) {
  // kubernetes-models lays models out as GROUP/VERSION/KIND (core: v1/KIND).
  if (!/^[a-z0-9.\-]+(\/[a-z0-9]+)?$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    return null;
  }
  try {
    const mod = require(`kubernetes-models/${apiVersion}/${kind}`);
    return mod[kind] || null;
  } catch (e) {
    if (e.code === "MODULE_NOT_FOUND" || e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED") return null;
    throw e;
  }
}

// A proxy of `obj` that records, per object path, the property names read.
function traced(obj, reads, p) {
  if (obj === null || typeof obj !== "object") return obj;
  const keys = new Set();
  reads.push({ path: p, obj, keys });
  return new Proxy(obj, {
    get(t, k, r) {
      const v = Reflect.get(t, k, r);
      if (typeof k !== "string") return v;
      keys.add(k);
      if (!Object.prototype.hasOwnProperty.call(t, k)) return v;
      return traced(v, reads, `${p}/${k}`);
    },
  });
}

function validateSchema(where, doc) {
  const Model = modelFor(doc.apiVersion, doc.kind);
  if (!Model) {
    problem(where, `no Kubernetes schema for ${doc.apiVersion} ${doc.kind}`);
    return;
  }
  const data = JSON.parse(JSON.stringify(new Model(doc)));
  const reads = [];
  try {
    Model.prototype.validate.call(traced(data, reads, ""));
  } catch (e) {
    problem(where, `schema: ${e.message.replace(/\s+/g, " ")}`);
    return;  // unknown-field detection needs a complete validation pass
  }
  for (const { path: p, obj, keys } of reads) {
    if (Array.isArray(obj) || keys.size === 0) continue;  // free-form object
    for (const k of Object.keys(obj)) {
      if (!keys.has(k)) problem(where, `schema: unknown field ${p}/${k}`);
    }
  }
}

// ------------------------------------------------------------------- flags

// Checks the words of one command line (a container's command + args, or a
// probe's exec command). A word naming a bertps binary starts its flags;
// an `sh -c SCRIPT` script is read the same way, and the words after the
// script ("$@") belong to every binary the script runs.
function checkCommand(where, words) {
  let script = null;
  let rest = words;
  const base = (w) => path.basename(w);
  if (words.length >= 3 && /(^|\/)(ba)?sh$/.test(words[0]) && words[1] === "-c") {
    script = words[2];
    rest = words.slice(4);  // words[3] is $0
  }
  const used = [];  // [binary, flag]
  const binariesRun = [];
  if (script !== null) {
    const re = /(?:^|[\s;&|()$`"'])((?:[\w\/.]*\/)?(bertps_[a-z_]+|bertpsctl))(?=[\s;&|)"'`]|$)|(?:^|[\s"'])--([A-Za-z0-9_\-]+)/g;
    let m, current = null;
    while ((m = re.exec(script)) !== null) {
      if (m[2]) {
        current = m[2];
        binariesRun.push(current);
      } else if (current) {
        used.push([current, m[3]]);
      }
    }
  } else if (words.length > 0) {
    const b = base(words[0]);
    if (b.startsWith("bertps")) binariesRun.push(b);
    rest = words.slice(1);
  }
  for (const w of rest) {
    const m = /^--?([A-Za-z0-9_\-]+)/.exec(w);
    if (!m) continue;
    for (const b of binariesRun) used.push([b, m[1]]);
  }
  for (const b of binariesRun) {
    if (!flagsOf[b]) problem(where, `runs ${b}, which is not a known bertps binary`);
  }
  const seen = new Set();
  for (const [b, f] of used) {
    if (seen.has(`${b} ${f}`)) continue;
    seen.add(`${b} ${f}`);
    const flags = flagsOf[b];
    if (!flags) continue;
    const ok = flags.has(f) || (f.startsWith("no") && flags.has(f.slice(2)));
    if (!ok) problem(where, `${b} has no flag --${f}`);
  }
  return binariesRun;
}

// ----------------------------------------------------------- deploy rules

function podTemplate(doc) {
  switch (doc.kind) {
    case "Pod": return doc;
    case "Deployment": case "StatefulSet": case "DaemonSet": case "ReplicaSet": case "Job":
      return doc.spec && doc.spec.template;
    case "CronJob":
      return doc.spec && doc.spec.jobTemplate && doc.spec.jobTemplate.spec &&
             doc.spec.jobTemplate.spec.template;
    default: return null;
  }
}

function checkPod(where, doc, names) {
  const tpl = podTemplate(doc);
  if (!tpl || !tpl.spec) return;
  const spec = tpl.spec;
  const longRunning = doc.kind !== "Job" && doc.kind !== "CronJob" && doc.kind !== "Pod";
  const psc = spec.securityContext || {};
  if (psc.runAsNonRoot !== true) problem(where, "pod securityContext.runAsNonRoot is not true");
  if (longRunning && spec.restartPolicy && spec.restartPolicy !== "Always") {
    problem(where, `restartPolicy ${spec.restartPolicy} in a ${doc.kind}`);
  }
  if (!longRunning && !["OnFailure", "Never"].includes(spec.restartPolicy)) {
    problem(where, "a Job's pods need restartPolicy OnFailure or Never");
  }
  for (const v of spec.volumes || []) {
    if (v.configMap && !names.has(`ConfigMap/${v.configMap.name}`)) {
      problem(where, `volume ${v.name}: ConfigMap ${v.configMap.name} is not defined`);
    }
    if (v.persistentVolumeClaim && !names.has(`PersistentVolumeClaim/${v.persistentVolumeClaim.claimName}`)) {
      problem(where, `volume ${v.name}: PVC ${v.persistentVolumeClaim.claimName} is not defined`);
    }
    if (v.secret && !EXTERNAL_SECRETS.has(v.secret.secretName) && !names.has(`Secret/${v.secret.secretName}`)) {
      problem(where, `volume ${v.name}: Secret ${v.secret.secretName} is not defined`);
    }
    // Keys are read, never written, and never by other users: at most 0440
    // (the API's default, 0644, is world-readable).
    if (v.secret) {
      const modes = [v.secret.defaultMode ?? 0o644,
                     ...(v.secret.items || []).filter((i) => i.mode !== undefined).map((i) => i.mode)];
      for (const m of modes) {
        if ((m & ~0o440) !== 0) {
          problem(where, `volume ${v.name}: Secret mode 0${m.toString(8)} allows more than 0440`);
        }
      }
    }
  }
  const volumes = new Set((spec.volumes || []).map((v) => v.name));
  const containers = [...(spec.initContainers || []), ...(spec.containers || [])];
  for (const c of containers) {
    const cw = `${where} container ${c.name}`;
    const r = c.resources || {};
    for (const kind of ["requests", "limits"]) {
      for (const res of ["cpu", "memory"]) {
        if (!r[kind] || r[kind][res] === undefined) problem(cw, `no resources.${kind}.${res}`);
      }
    }
    const sc = c.securityContext || {};
    if (sc.readOnlyRootFilesystem !== true) problem(cw, "readOnlyRootFilesystem is not true");
    if (sc.allowPrivilegeEscalation !== false) problem(cw, "allowPrivilegeEscalation is not false");
    for (const m of c.volumeMounts || []) {
      if (!volumes.has(m.name)) problem(cw, `mounts undefined volume ${m.name}`);
    }
    const run = checkCommand(cw, [...(c.command || []), ...(c.args || [])]);
    if (run.length === 0) problem(cw, "starts no bertps binary");
    for (const probe of ["livenessProbe", "readinessProbe", "startupProbe"]) {
      const p = c[probe];
      if (p && p.exec) checkCommand(`${cw} ${probe}`, p.exec.command || []);
    }
    if (longRunning && (!c.livenessProbe || !c.readinessProbe)) {
      problem(cw, "a long-running container needs liveness and readiness probes");
    }
  }
}

// A LabelSelector (matchLabels and matchExpressions) against labels.
function selects(sel, labels) {
  if (!sel) return true;
  for (const [k, v] of Object.entries(sel.matchLabels || {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of sel.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const inValues = has && (e.values || []).includes(labels[e.key]);
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

// A NetworkPolicy selects at least one pod template, and every port it
// names is a container port of a pod it selects.
function checkNetworkPolicy(where, doc, pods) {
  const spec = doc.spec || {};
  const selected = pods.filter((p) => selects(spec.podSelector, p.labels));
  if (selected.length === 0) {
    problem(where, `podSelector ${JSON.stringify(spec.podSelector)} matches no pod template`);
    return;
  }
  const portNames = new Set();
  for (const p of selected) for (const n of p.portNames) portNames.add(n);
  for (const rule of [...(spec.ingress || []), ...(spec.egress || [])]) {
    for (const port of rule.ports || []) {
      if (typeof port.port === "string" && !portNames.has(port.port)) {
        problem(where, `port ${port.port}: no pod it selects has a container port of that name`);
      }
    }
  }
}

function checkService(where, doc, podLabels) {
  const sel = doc.spec && doc.spec.selector;
  if (!sel) return;
  const hit = podLabels.some((labels) =>
    Object.entries(sel).every(([k, v]) => labels[k] === v));
  if (!hit) problem(where, `selector ${JSON.stringify(sel)} matches no pod template`);
}

// The JobSpec the submit Job sends must fit the pods: the train workers'
// Deployment has at least its min_workers (else num_workers) pods (an
// Indexed train Job: completions and parallelism num_workers); its
// num_ps_shards at most the shards' replicas.
function checkJobSpec(file, docs) {
  const cm = docs.find((d) => d.kind === "ConfigMap" && d.data && d.data["job.pbtxt"]);
  if (!cm) return;
  const spec = cm.data["job.pbtxt"];
  const field = (name) => {
    const m = new RegExp(`^\\s*${name}\\s*:\\s*(\\d+)`, "m").exec(spec);
    return m ? Number(m[1]) : null;
  };
  const where = `${path.basename(file)} ConfigMap/${cm.metadata.name}`;
  const workers = field("num_workers"), shards = field("num_ps_shards");
  const least = field("min_workers") || workers;
  if (workers === null || shards === null) {
    problem(where, "job.pbtxt lacks num_workers or num_ps_shards");
    return;
  }
  for (const d of docs) {
    const w = `${path.basename(file)} ${d.kind}/${d.metadata && d.metadata.name}`;
    if (d.kind === "Job" && d.spec && d.spec.completionMode === "Indexed") {
      for (const k of ["completions", "parallelism"]) {
        if (d.spec[k] !== workers) {
          problem(w, `${k} ${d.spec[k]} != the JobSpec's num_workers ${workers}`);
        }
      }
    }
    const component = d.spec && d.spec.template && d.spec.template.metadata &&
        d.spec.template.metadata.labels &&
        d.spec.template.metadata.labels["app.kubernetes.io/component"];
    if (d.kind === "Deployment" && component === "train-worker" &&
        (d.spec.replicas ?? 1) < least) {
      problem(w, `replicas ${d.spec.replicas ?? 1} < the JobSpec's ${
          field("min_workers") ? "min_workers" : "num_workers"} ${least}`);
    }
    if (d.kind === "StatefulSet" && d.spec && (d.spec.replicas ?? 1) < shards) {
      problem(w, `replicas ${d.spec.replicas} < the JobSpec's num_ps_shards ${shards}`);
    }
  }
}

// -------------------------------------------------------------------- main

for (const file of files) {
  let docs;
  try {
    docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d !== null);
  } catch (e) {
    problem(file, `YAML: ${e.message.split("\n")[0]}`);
    continue;
  }
  if (docs.length === 0) problem(file, "no objects");
  const names = new Set();
  const podLabels = [];
  const pods = [];  // {labels, portNames} of each pod template
  for (const d of docs) {
    if (d && d.kind && d.metadata) names.add(`${d.kind}/${d.metadata.name}`);
    const tpl = d && podTemplate(d);
    if (tpl && tpl.metadata && tpl.metadata.labels) podLabels.push(tpl.metadata.labels);
    if (tpl) {
      const portNames = [];
      for (const c of [...((tpl.spec || {}).initContainers || []), ...((tpl.spec || {}).containers || [])]) {
        for (const p of c.ports || []) if (p.name) portNames.push(p.name);
      }
      pods.push({ labels: (tpl.metadata && tpl.metadata.labels) || {}, portNames });
    }
  }
  for (const d of docs) {
    if (!d || typeof d !== "object" || !d.apiVersion || !d.kind || !d.metadata || !d.metadata.name) {
      problem(file, `an object without apiVersion, kind or metadata.name: ${JSON.stringify(d).slice(0, 80)}`);
      continue;
    }
    const where = `${path.basename(file)} ${d.kind}/${d.metadata.name}`;
    const before = problems;
    validateSchema(where, d);
    checkPod(where, d, names);
    if (d.kind === "Service") checkService(where, d, podLabels);
    if (d.kind === "NetworkPolicy") checkNetworkPolicy(where, d, pods);
    if (d.kind === "StatefulSet") {
      const svc = docs.find((s) => s.kind === "Service" && s.metadata.name === d.spec.serviceName);
      if (!svc) problem(where, `serviceName ${d.spec.serviceName}: no such Service`);
      else if (svc.spec.clusterIP !== "None") problem(where, `Service ${svc.metadata.name} is not headless`);
    }
    if (problems === before) console.log(`ok ${where}`);
  }
  checkJobSpec(file, docs.filter((d) => d && d.kind && d.metadata));
}
console.log(problems === 0 ? "all objects valid" : `${problems} problem(s)`);
process.exit(problems === 0 ? 0 : 1);

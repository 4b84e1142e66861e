#!/usr/bin/env node
// Drives the independent JavaScript port of BERT's tokenization.py that npm
// @tensorflow-models/qna ships (dist/bert_tokenizer.js; tools/get_data.sh
// puts it in data/ref/tfjs-qna) on the bert-base-uncased vocab in its
// SentencePiece-style form (data/vocab/bert-base-uncased-sentencepiece.json,
// the form that port expects). Used by tests/tokenizer_parity_test.sh and for
// the throughput comparison in tools/bench.sh.
//
//   node js_ref_tokenize.js tokenize --ref DIR --vocab-json V [--mode M] < in > out
//       one line of space-separated ids per input line (like
//       `bert_local tokenize`)
//   node js_ref_tokenize.js bench --ref DIR --vocab-json V --file F [--mode M]
//       one JSON line: MB/s over F's lines, medians of --repeat passes, by
//       process CPU time (mb_per_s; includes V8's GC threads) and wall clock
//
// The port departs from tokenization.py in ways its own tests show (e.g. it
// expects 'a new\b\v [test]' -> [1037, 100, ...]: "\b" stays in the word).
// --mode selects how it is run:
//   raw       the port exactly as shipped
//   faithful  (default) the port with each known departure corrected, so that
//             it must agree with tokenization.py; every correction is listed
//             in FIXES below and leaves the port's own whitespace split,
//             ASCII punctuation split, lowercasing and WordPiece search (trie
//             over the vocab) to do the work.
'use strict';

const fs = require('fs');
const path = require('path');
const Module = require('module');

function parseArgs(argv) {
  const out = {cmd: argv[0], mode: 'faithful', repeat: 5};
  for (let i = 1; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '').replace(/-/g, '_');
    out[k] = argv[i + 1];
  }
  return out;
}

// The port requires @tensorflow/tfjs-core only to download its vocab; the
// vocab comes from a local file here, so the module is stubbed.
function loadReference(refDir) {
  const origLoad = Module._load;
  Module._load = function(request, parent, isMain) {
    if (request === '@tensorflow/tfjs-core') {
      return {util: {fetch() { throw new Error('offline: vocab is local'); }}};
    }
    return origLoad.apply(this, arguments);
  };
  try {
    return require(path.resolve(refDir, 'dist/bert_tokenizer.js'));
  } finally {
    Module._load = origLoad;
  }
}

async function makeTokenizer(args) {
  const ref = loadReference(args.ref);
  const vocab = JSON.parse(fs.readFileSync(args.vocab_json, 'utf8'));
  const tok = new ref.BertTokenizer();
  tok.loadVocab = async () => vocab;
  await tok.load();
  return tok;
}

// ------------------------------------------------------------------ FIXES
// F1 cleaning: tokenization.py drops every Cc/Cf character except \t \n \r
//    (so "a\vb" and "a\u200bb" are the word "ab"); the port drops only
//    U+0000 and U+FFFD and treats \v \f \x1c-\x1f U+FEFF as whitespace and
//    other controls as letters. U+FFFD (also what an ill-formed byte decodes
//    to) goes here too: before lowercasing, as it can decide final sigma.
// F2 CJK: tokenization.py puts spaces around CJK ideographs; the port does
//    not ("中文" becomes 中 ##文 instead of 中 文).
// F3 lowercasing: tokenization.py does lower(), NFD, and drops Mn marks
//    (accent stripping); the port lowercases but keeps accents, and applies
//    NFKC to every word, which tokenization.py never does (the port's NFKC is
//    turned off; "ﬁ", "²", fullwidth letters, "…" keep their code points).
// F4 punctuation: tokenization.py splits off every Unicode P* character; the
//    port only its list of ASCII punctuation.
// F5 WordPiece: the port's trie lookup accepts any trie node as a match
//    (`match.end != null` is true for end === false), so a candidate that is
//    a proper prefix of a vocab entry ends the search with an undefined id
//    and the whole word becomes [UNK]: "unaffable" ("unaff" starts
//    "unaffected") and "johanson" ("johans" starts "johansson"), the
//    README's own examples, come out as [UNK] instead of una ##ffa ##ble and
//    johan ##son; tokenization.py only accepts whole vocab entries.
// F6 long words: tokenization.py maps a word of more than 200 code points to
//    [UNK]; the port has no limit.
const CJK = /[\u4E00-\u9FFF\u3400-\u4DBF\u{20000}-\u{2A6DF}\u{2A700}-\u{2B73F}\u{2B740}-\u{2B81F}\u{2B820}-\u{2CEAF}\uF900-\uFAFF\u{2F800}-\u{2FA1F}]/gu;
const CONTROL = /[\p{Cc}\p{Cf}\uFFFD]/gu;
// A word piece as the port splits it: no whitespace, no ASCII punctuation.
const PORT_PIECE = /[^\s!-\/:-@\[-`{-~]+/gu;
const LONG_WORD = '\uE000';  // private use: in no vocab, so the port's [UNK]

function pythonize(text) {
  text = text.replace(CONTROL, (c) => (c === '\t' || c === '\n' || c === '\r') ? c : '');  // F1
  text = text.replace(CJK, ' $& ');                                                       // F2
  text = text.toLowerCase().normalize('NFD').replace(/\p{Mn}/gu, '');                    // F3
  text = text.replace(/\p{P}/gu, ' $& ');                                                 // F4
  return text.replace(PORT_PIECE, (w) => ([...w].length > 200 ? LONG_WORD : w));          // F6
}

function installFixes(tok) {
  const trieProto = Object.getPrototypeOf(tok.trie);                                      // F5
  const find = trieProto.find;
  trieProto.find = function(s) {
    const node = find.call(this, s);
    return node != null && node.end === true ? node : null;
  };
  const normalize = String.prototype.normalize;                                           // F3
  const plain = tok.tokenize.bind(tok);
  return (line) => {
    const text = pythonize(line);
    String.prototype.normalize = function(form) {
      return form === 'NFKC' ? String(this) : normalize.call(this, form);
    };
    try {
      return plain(text);
    } finally {
      String.prototype.normalize = normalize;
    }
  };
}

// Lines as `bert_local tokenize` sees them: split at '\n', a last line
// without '\n' counts. Ill-formed UTF-8 decodes to U+FFFD, which both sides
// drop (tokenization.py decodes with errors="ignore").
function readLines(buf) {
  const text = buf.toString('utf8');
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.ref || !args.vocab_json || !['tokenize', 'bench'].includes(args.cmd) ||
      !['raw', 'faithful'].includes(args.mode)) {
    process.stderr.write('usage: js_ref_tokenize.js tokenize|bench --ref DIR ' +
                         '--vocab-json V [--mode raw|faithful] [--file F]\n');
    process.exit(2);
  }
  const tok = await makeTokenizer(args);
  const tokenize = args.mode === 'raw' ? tok.tokenize.bind(tok) : installFixes(tok);
  if (args.cmd === 'tokenize') {
    const lines = readLines(fs.readFileSync(0));
    const out = lines.map((l) => tokenize(l).join(' ') + '\n');
    fs.writeFileSync(1, out.join(''));
    return;
  }
  const buf = fs.readFileSync(args.file);
  const lines = readLines(buf);
  const wall = [], cpu = [];
  let tokens = 0;
  for (let r = 0; r <= Number(args.repeat); ++r) {  // pass 0 warms up
    tokens = 0;
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    for (const l of lines) tokens += tokenize(l).length;
    const c = process.cpuUsage(c0);
    if (r > 0) {
      wall.push(Number(process.hrtime.bigint() - t0) / 1e9);
      cpu.push((c.user + c.system) / 1e6);
    }
  }
  const median = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
  const cpuS = median(cpu), wallS = median(wall);
  process.stdout.write(JSON.stringify({
    impl: 'tfjs-qna-1.0.2', mode: args.mode, file: args.file, bytes: buf.length,
    lines: lines.length, tokens, cpu_seconds: cpuS, wall_seconds: wallS,
    mb_per_s: buf.length / cpuS / 1e6, mb_per_s_wall: buf.length / wallS / 1e6,
    tokens_per_s: tokens / cpuS,
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`js_ref_tokenize: ${e.stack || e}\n`);
  process.exit(1);
});

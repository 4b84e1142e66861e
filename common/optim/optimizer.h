// bertps optimizer library: the public header of //common/optim:optimizer.
//
//   optimizer_config.h  OptimizerKind, OptimizerConfig, ValidateConfig,
//                       ParseOptimizerKind, UsesWeightDecay, StateSlots
//   lr_schedule.h       LearningRate (BERT's warmup + linear decay)
//   slice_update.h      two-phase slice kernels for in-process use and for
//                       parameter-server shards (clipping, Adam family, LAMB,
//                       SGD)
//   tensor_optimizer.h  TensorOptimizer, a whole-step driver over named
//                       tensors for single-process training
//
// Thread-safety and ownership: see each header.
#ifndef BERTPS_COMMON_OPTIM_OPTIMIZER_H_
#define BERTPS_COMMON_OPTIM_OPTIMIZER_H_

#include "common/optim/lr_schedule.h"
#include "common/optim/optimizer_config.h"
#include "common/optim/slice_update.h"
#include "common/optim/tensor_optimizer.h"

#endif  // BERTPS_COMMON_OPTIM_OPTIMIZER_H_

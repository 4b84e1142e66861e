// Eigen views over the model's flat row-major buffers (no copies).
#ifndef BERTPS_COMMON_MODEL_EIGEN_MAPS_H_
#define BERTPS_COMMON_MODEL_EIGEN_MAPS_H_

#include "Eigen/Core"

namespace bertps {
namespace model_maps {

template <typename T>
using RowMat = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic,
                                       Eigen::RowMajor>>;
template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace model_maps
}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_EIGEN_MAPS_H_

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "proto/tensor.pb.h"

namespace bertps {
namespace {

TEST(TensorProto, RawBytesRoundTrip) {
  std::vector<float> values = {1.5f, -2.25f, 3.0e-7f, 65504.f};
  TensorChunk chunk;
  chunk.set_name("bert.pooler.dense.bias");
  chunk.set_dtype(F32);
  chunk.add_shape(2);
  chunk.add_shape(2);
  chunk.set_offset(0);
  chunk.set_data(values.data(), values.size() * sizeof(float));

  std::string wire;
  ASSERT_TRUE(chunk.SerializeToString(&wire));
  TensorChunk back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.name(), "bert.pooler.dense.bias");
  EXPECT_EQ(back.dtype(), F32);
  ASSERT_EQ(back.shape_size(), 2);
  ASSERT_EQ(back.data().size(), values.size() * sizeof(float));
  std::vector<float> got(values.size());
  std::memcpy(got.data(), back.data().data(), back.data().size());
  EXPECT_EQ(got, values);
}

TEST(TensorProto, TruncatedWireIsRejected) {
  TensorChunk chunk;
  chunk.set_name("x");
  chunk.set_data(std::string(100, 'a'));
  std::string wire = chunk.SerializeAsString();
  TensorChunk back;
  EXPECT_FALSE(back.ParseFromString(wire.substr(0, wire.size() - 10)));
}

}  // namespace
}  // namespace bertps

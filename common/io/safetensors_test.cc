#include "common/io/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/io/file_util.h"
#include "common/io/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string U64Le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file with the given header text and data bytes.
std::string MakeFile(const std::string& header, const std::string& data) {
  return U64Le(header.size()) + header + data;
}

absl::Status ParseStatus(const std::string& bytes) {
  return SafetensorsReader::FromBuffer(bytes, "test.safetensors").status();
}

TEST(DTypeTest, NamesAndSizes) {
  const std::vector<std::pair<DType, int>> all = {
      {DType::kF32, 4}, {DType::kF16, 2}, {DType::kBF16, 2},
      {DType::kI32, 4}, {DType::kI64, 8}, {DType::kF64, 8},
      {DType::kU8, 1},  {DType::kI8, 1},  {DType::kBool, 1}};
  for (const auto& [dtype, size] : all) {
    EXPECT_EQ(DTypeSize(dtype), size);
    auto parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeName(DType::kBool), "BOOL");
  EXPECT_FALSE(ParseDType("f32").ok());
  EXPECT_FALSE(ParseDType("F8_E4M3").ok());
}

TEST(SafetensorsTest, HandMadeFileParses) {
  // Two tensors written byte by byte: "b" (I32, [2]) at [0, 8) and
  // "a" (F32, [1, 2]) at [8, 16), with metadata and space padding.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[8,16]}}   ";
  const std::string data(
      "\x07\x00\x00\x00"   // b[0] = 7
      "\xfe\xff\xff\xff"   // b[1] = -2
      "\x00\x00\x80\x3f"   // a[0] = 1.0f
      "\x00\x00\x20\xc0",  // a[1] = -2.5f
      16);
  auto r = SafetensorsReader::FromBuffer(MakeFile(header, data), "hand");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->tensors().size(), 2u);
  // Listed in data order.
  EXPECT_EQ(r->tensors()[0].name, "b");
  EXPECT_EQ(r->tensors()[1].name, "a");
  const TensorInfo* a = r->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_THAT(a->shape, ElementsAre(1, 2));
  EXPECT_EQ(a->num_elements(), 2);
  EXPECT_EQ(r->Find("c"), nullptr);
  auto av = r->ReadF32("a");
  ASSERT_TRUE(av.ok()) << av.status();
  EXPECT_THAT(*av, ElementsAre(1.0f, -2.5f));
  auto bv = r->ReadI32("b");
  ASSERT_TRUE(bv.ok()) << bv.status();
  EXPECT_THAT(*bv, ElementsAre(7, -2));
  EXPECT_EQ(r->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, WriterLayoutIsAlignedAndPadded) {
  SafetensorsWriter w;
  const float x[3] = {1, 2, 3};
  w.AddF32("x", {3}, x);
  w.SetMetadata("k", "v");
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok());
  uint64_t n;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes->size(), 8 + n + 12);
  const std::string header = bytes->substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            "{\"__metadata__\":{\"k\":\"v\"},\"x\":{\"dtype\":\"F32\","
            "\"shape\":[3],\"data_offsets\":[0,12]}}");
  float back[3];
  std::memcpy(back, bytes->data() + 8 + n, 12);
  EXPECT_EQ(back[2], 3.0f);
}

TEST(SafetensorsTest, RoundTripEveryDType) {
  std::mt19937 rng(1);
  SafetensorsWriter w;
  std::vector<float> f32(6);
  for (auto& v : f32) v = std::uniform_real_distribution<float>(-4, 4)(rng);
  std::vector<int32_t> i32 = {1, -1, 2147483647, -2147483647 - 1};
  std::vector<int64_t> i64 = {5, -6, 1LL << 40};
  std::vector<double> f64 = {0.1, -1e300, 3.5};
  std::vector<uint8_t> u8 = {0, 255, 7};
  std::vector<int8_t> i8 = {-128, 127, 0};
  std::vector<uint8_t> b = {1, 0, 1, 1};
  w.AddF32("f32", {2, 3}, f32.data());
  w.AddF16FromF32("f16", {2, 3}, f32.data());
  w.AddBF16FromF32("bf16", {2, 3}, f32.data());
  w.AddI32("i32", {4}, i32.data());
  w.AddRaw("i64", DType::kI64, {3}, i64.data());
  w.AddRaw("f64", DType::kF64, {3}, f64.data());
  w.AddRaw("u8", DType::kU8, {3}, u8.data());
  w.AddRaw("i8", DType::kI8, {3}, i8.data());
  w.AddRaw("bool", DType::kBool, {2, 2}, b.data());
  w.AddF32("scalar", {}, f32.data());
  w.AddF32("empty", {0, 5}, nullptr);
  w.SetMetadata("format", "pt");
  const std::string path = TempPath("every_dtype.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);

  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->tensors().size(), 11u);
  // Insertion order is the data order.
  EXPECT_EQ(r->tensors()[0].name, "f32");
  EXPECT_EQ(r->tensors()[9].name, "scalar");
  EXPECT_EQ(r->metadata().at("format"), "pt");

  EXPECT_EQ(*r->ReadF32("f32"), f32);
  auto f16 = *r->ReadF32("f16");
  auto bf16 = *r->ReadF32("bf16");
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(f16[i], F16ToF32(F32ToF16(f32[i])));
    EXPECT_NEAR(f16[i], f32[i], 4e-3);
    EXPECT_EQ(bf16[i], Bf16ToF32(F32ToBf16(f32[i])));
    EXPECT_NEAR(bf16[i], f32[i], 3e-2);
  }
  EXPECT_EQ(r->Find("f16")->dtype, DType::kF16);
  EXPECT_EQ(r->Find("bf16")->dtype, DType::kBF16);
  EXPECT_EQ(*r->ReadI32("i32"), i32);
  EXPECT_TRUE(absl::IsInvalidArgument(r->ReadI32("i64").status()));
  auto f64r = *r->ReadF32("f64");
  EXPECT_EQ(f64r[0], 0.1f);
  EXPECT_TRUE(std::isinf(f64r[1]));
  auto raw = [&](const char* name) { return std::string(*r->RawBytes(name)); };
  EXPECT_EQ(raw("i64"), std::string(reinterpret_cast<char*>(i64.data()), 24));
  EXPECT_EQ(raw("f64"), std::string(reinterpret_cast<char*>(f64.data()), 24));
  EXPECT_EQ(raw("u8"), std::string(reinterpret_cast<char*>(u8.data()), 3));
  EXPECT_EQ(raw("i8"), std::string(reinterpret_cast<char*>(i8.data()), 3));
  EXPECT_EQ(raw("bool"), std::string(reinterpret_cast<char*>(b.data()), 4));
  EXPECT_EQ(r->Find("bool")->dtype, DType::kBool);
  EXPECT_EQ(*r->ReadF32("scalar"), std::vector<float>{f32[0]});
  EXPECT_TRUE(r->Find("scalar")->shape.empty());
  EXPECT_EQ(r->Find("empty")->num_elements(), 0);
  EXPECT_TRUE(r->ReadF32("empty")->empty());
}

TEST(SafetensorsTest, I64OutOfInt32RangeIsRejected) {
  SafetensorsWriter w;
  const int64_t v[2] = {1, 1LL << 40};
  const int64_t small[2] = {-3, 2147483647};
  w.AddRaw("big", DType::kI64, {2}, v);
  w.AddRaw("small", DType::kI64, {2}, small);
  auto r = SafetensorsReader::FromBuffer(*w.Serialize(), "f");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r->ReadI32("small"), ElementsAre(-3, 2147483647));
  auto s = r->ReadI32("big").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("big"));
}

TEST(SafetensorsTest, CallerErrors) {
  SafetensorsWriter w;
  const float x[4] = {1, 2, 3, 4};
  const int32_t k[1] = {3};
  w.AddF32("x", {2, 2}, x);
  w.AddI32("k", {1}, k);
  auto r = SafetensorsReader::FromBuffer(*w.Serialize(), "model.st");
  ASSERT_TRUE(r.ok());
  float dst[3];
  auto s = r->ReadF32("x", dst, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("model.st"));
  EXPECT_THAT(s.message(), HasSubstr("\"x\""));
  EXPECT_TRUE(absl::IsNotFound(r->ReadF32("nope").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(r->ReadF32("k").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(r->ReadI32("x").status()));
}

TEST(SafetensorsTest, WriterRejectsDuplicatesAndBadShapes) {
  const float x[1] = {1};
  {
    SafetensorsWriter w;
    w.AddF32("x", {1}, x);
    w.AddF32("x", {1}, x);
    auto s = w.Write(TempPath("dup.safetensors"));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("\"x\""));
    EXPECT_NE(access(TempPath("dup.safetensors").c_str(), F_OK), 0);
  }
  {
    SafetensorsWriter w;
    w.AddF32("neg", {-1}, x);
    EXPECT_TRUE(absl::IsInvalidArgument(w.Serialize().status()));
  }
  {
    SafetensorsWriter w;
    w.AddF32("__metadata__", {1}, x);
    EXPECT_TRUE(absl::IsInvalidArgument(w.Serialize().status()));
  }
  {
    SafetensorsWriter w;
    w.AddF32("bad\xff", {1}, x);
    EXPECT_TRUE(absl::IsInvalidArgument(w.Serialize().status()));
  }
}

// --- Corruption: each case fails cleanly with DataLoss naming the problem.

const char kGoodHeader[] =
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

void ExpectDataLoss(const std::string& bytes, const std::string& needle) {
  const absl::Status s = ParseStatus(bytes);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("test.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr(needle));
}

TEST(SafetensorsCorruptionTest, GoodBaselineParses) {
  EXPECT_TRUE(ParseStatus(MakeFile(kGoodHeader, std::string(8, '\0'))).ok());
}

TEST(SafetensorsCorruptionTest, TruncatedFile) {
  const std::string good = MakeFile(kGoodHeader, std::string(8, '\0'));
  ExpectDataLoss("", "too short");
  ExpectDataLoss(good.substr(0, 5), "too short");
  // Cut inside the header: the length runs past EOF.
  ExpectDataLoss(good.substr(0, 20), "past the end");
  // Cut inside the data: the offsets run past the data.
  ExpectDataLoss(good.substr(0, good.size() - 1), "\"w\"");
  ExpectDataLoss(good.substr(0, good.size() - 1), "outside the data");
}

TEST(SafetensorsCorruptionTest, HeaderLengthPastEof) {
  ExpectDataLoss(U64Le(1000) + "{}", "past the end");
  ExpectDataLoss(U64Le(~0ull) + "{}", "past the end");
}

TEST(SafetensorsCorruptionTest, HugeHeaderLength) {
  const std::string big(101u << 20, ' ');
  ExpectDataLoss(U64Le(big.size()) + big, "exceeds");
}

TEST(SafetensorsCorruptionTest, BadJson) {
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":", ""), "not valid JSON");
  ExpectDataLoss(MakeFile("[1,2]", ""), "start with '{'");
  ExpectDataLoss(MakeFile("{\"w\": 3}", ""), "\"w\"");
  ExpectDataLoss(MakeFile("{\"__metadata__\":{\"a\":1}}", ""), "__metadata__");
  ExpectDataLoss(MakeFile("{\"w\":\"\xff\"}", ""), "not valid JSON");
  ExpectDataLoss(MakeFile(std::string("{}\0\0", 4), ""), "NUL");
}

TEST(SafetensorsCorruptionTest, MissingFields) {
  ExpectDataLoss(
      MakeFile("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", "12345678"),
      "dtype");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}",
                          "12345678"),
                 "shape");
  ExpectDataLoss(
      MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", "12345678"),
      "data_offsets");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                          "\"data_offsets\":[0]}}",
                          "12345678"),
                 "data_offsets");
}

TEST(SafetensorsCorruptionTest, UnknownDType) {
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F8\",\"shape\":[2],"
                          "\"data_offsets\":[0,2]}}",
                          "12"),
                 "unknown safetensors dtype \"F8\"");
}

TEST(SafetensorsCorruptionTest, NegativeOrHugeDims) {
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],"
                          "\"data_offsets\":[0,8]}}",
                          "12345678"),
                 "negative");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
                          "4294967296],\"data_offsets\":[0,8]}}",
                          "12345678"),
                 "too large");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],"
                          "\"data_offsets\":[0,8]}}",
                          "12345678"),
                 "non-integer");
}

TEST(SafetensorsCorruptionTest, OffsetsOutOfRange) {
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                          "\"data_offsets\":[8,16]}}",
                          "12345678"),
                 "outside the data");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                          "\"data_offsets\":[8,0]}}",
                          "12345678"),
                 "outside the data");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                          "\"data_offsets\":[-1,7]}}",
                          "12345678"),
                 "non-negative");
}

TEST(SafetensorsCorruptionTest, SizeMismatch) {
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],"
                          "\"data_offsets\":[0,8]}}",
                          "12345678"),
                 "needs 12");
  ExpectDataLoss(MakeFile("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],"
                          "\"data_offsets\":[0,8]}}",
                          "12345678"),
                 "needs 4");
}

TEST(SafetensorsCorruptionTest, OverlappingTensors) {
  ExpectDataLoss(
      MakeFile(
          "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
          "12345678"),
      "overlaps tensor \"a\"");
}

TEST(SafetensorsCorruptionTest, RandomMutationsNeverCrash) {
  SafetensorsWriter w;
  std::vector<float> x(10, 1.5f);
  w.AddF32("layer.0.weight", {2, 5}, x.data());
  w.AddBF16FromF32("layer.0.bias", {5}, x.data());
  w.SetMetadata("step", "12");
  const std::string good = *w.Serialize();
  std::mt19937 rng(5);
  int ok = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int flips = 1 + rng() % 3;
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto r = SafetensorsReader::FromBuffer(bytes, "fuzz");
    if (!r.ok()) continue;
    ++ok;
    for (const TensorInfo& t : r->tensors()) {
      (void)r->ReadF32(t.name);
      (void)r->ReadI32(t.name);
    }
  }
  EXPECT_GT(ok, 0);  // Flips inside the data keep the file valid.
}

TEST(SafetensorsTest, OpenMissingFile) {
  auto r = SafetensorsReader::Open(TempPath("does_not_exist.safetensors"));
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
}

}  // namespace
}  // namespace io
}  // namespace bertps

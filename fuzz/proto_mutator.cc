#include "fuzz/proto_mutator.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace bertps {
namespace fuzz {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

template <typename T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  std::uniform_int_distribution<size_t> d(0, values.size() - 1);
  return *(values.begin() + d(rng));
}

int64_t NewInt(std::mt19937_64& rng, int64_t old, int64_t lo, int64_t hi) {
  switch (rng() % 6) {
    case 0:
      return Pick<int64_t>(rng, {0, 1, -1, 2, lo, hi, lo + 1, hi - 1});
    case 1:  // wrapping arithmetic: the mutator itself has no UB
      return static_cast<int64_t>(static_cast<uint64_t>(old) + 1);
    case 2:
      return static_cast<int64_t>(static_cast<uint64_t>(old) - 1);
    case 3:
      return static_cast<int64_t>(0 - static_cast<uint64_t>(old));
    case 4:
      return static_cast<int64_t>(rng() % 64);
    default:
      return static_cast<int64_t>(rng());
  }
}

double NewDouble(std::mt19937_64& rng, double old) {
  switch (rng() % 5) {
    case 0:
      return Pick<double>(rng, {0.0, -0.0, 1.0, -1.0,
                                std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::denorm_min(),
                                1e300, 1e-300});
    case 1:
      return old * 2;
    case 2:
      return -old;
    case 3:
      return std::uniform_real_distribution<double>(-10, 10)(rng);
    default: {
      const uint64_t bits = rng();
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return d;
    }
  }
}

// Sets field f (element `index` when repeated, -1 to add one) to a new value.
void MutateField(Message* m, const FieldDescriptor* f, int index,
                 std::mt19937_64& rng, const BytesMutator& mutate_bytes) {
  const Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  const bool add = rep && index < 0;
#define BERTPS_SET(Type, value)                          \
  do {                                                   \
    if (add) {                                           \
      r->Add##Type(m, f, value);                         \
    } else if (rep) {                                    \
      r->SetRepeated##Type(m, f, index, value);          \
    } else {                                             \
      r->Set##Type(m, f, value);                         \
    }                                                    \
  } while (0)
#define BERTPS_GET(Type) \
  (add ? 0 : rep ? r->GetRepeated##Type(*m, f, index) : r->Get##Type(*m, f))
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      BERTPS_SET(Int32, static_cast<int32_t>(NewInt(
                            rng, BERTPS_GET(Int32),
                            std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max())));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      BERTPS_SET(Int64, NewInt(rng, BERTPS_GET(Int64),
                               std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max()));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      BERTPS_SET(UInt32, static_cast<uint32_t>(
                             NewInt(rng, BERTPS_GET(UInt32), 0,
                                    std::numeric_limits<uint32_t>::max())));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      BERTPS_SET(UInt64, static_cast<uint64_t>(NewInt(
                             rng, static_cast<int64_t>(BERTPS_GET(UInt64)), 0,
                             std::numeric_limits<int64_t>::max())));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      BERTPS_SET(Double, NewDouble(rng, BERTPS_GET(Double)));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      BERTPS_SET(Float, static_cast<float>(NewDouble(rng, BERTPS_GET(Float))));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      BERTPS_SET(Bool, !BERTPS_GET(Bool));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      // Known values mostly, sometimes an unknown number.
      if (rng() % 4 == 0) {
        BERTPS_SET(EnumValue, static_cast<int>(NewInt(rng, 0, -1, 100)));
      } else {
        const auto* e = f->enum_type();
        BERTPS_SET(EnumValue,
                   e->value(static_cast<int>(rng() % e->value_count()))->number());
      }
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = add ? std::string()
                      : rep ? r->GetRepeatedString(*m, f, index)
                            : r->GetString(*m, f);
      mutate_bytes(&s);
      BERTPS_SET(String, std::move(s));
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* sub = add   ? r->AddMessage(m, f)
                     : rep ? r->MutableRepeatedMessage(m, f, index)
                           : r->MutableMessage(m, f);
      MutateMessage(sub, rng, mutate_bytes);
      break;
    }
  }
#undef BERTPS_SET
#undef BERTPS_GET
}

}  // namespace

void MutateMessage(Message* m, std::mt19937_64& rng,
                   const BytesMutator& mutate_bytes) {
  const auto* d = m->GetDescriptor();
  if (d->field_count() == 0) return;
  const FieldDescriptor* f = d->field(static_cast<int>(rng() % d->field_count()));
  const Reflection* r = m->GetReflection();
  if (!f->is_repeated()) {
    MutateField(m, f, 0, rng, mutate_bytes);
    return;
  }
  const int n = r->FieldSize(*m, f);
  const int what = static_cast<int>(rng() % 4);
  if (n == 0 || what == 0) {
    MutateField(m, f, -1, rng, mutate_bytes);  // add one
  } else if (what == 1) {
    r->RemoveLast(m, f);
  } else {
    MutateField(m, f, static_cast<int>(rng() % n), rng, mutate_bytes);
  }
}

size_t MutateScript(uint8_t* data, size_t size, size_t max_size,
                    unsigned int seed, size_t setup_bytes,
                    const std::function<PayloadKind(uint8_t op)>& kind_of,
                    const BytesMutator& mutate_bytes) {
  if (size < setup_bytes) return 0;
  FuzzInput in(data + setup_bytes, size - setup_bytes);
  std::vector<std::pair<uint8_t, std::string>> records;
  while (auto rec = in.Next()) {
    records.emplace_back(rec->op, std::string(rec->payload));
  }
  if (records.empty()) return 0;
  std::mt19937_64 rng(seed);
  const size_t i = rng() % records.size();
  switch (rng() % 8) {
    case 0:  // duplicate a record (retries, repeated requests)
      records.insert(records.begin() + rng() % (records.size() + 1),
                     records[i]);
      break;
    case 1:  // drop one
      records.erase(records.begin() + i);
      break;
    case 2:  // swap two
      std::swap(records[i], records[rng() % records.size()]);
      break;
    case 3:  // another op code, same payload
      records[i].first = static_cast<uint8_t>(rng());
      break;
    default: {  // change one field of one request
      const PayloadKind kind = kind_of(records[i].first);
      std::string& p = records[i].second;
      if (kind.prototype == nullptr) {
        mutate_bytes(&p);
        break;
      }
      std::unique_ptr<google::protobuf::Message> m(kind.prototype->New());
      const bool parsed =
          kind.text_format
              ? google::protobuf::TextFormat::ParseFromString(p, m.get())
              : m->ParseFromString(p);
      if (!parsed) {
        mutate_bytes(&p);
        break;
      }
      MutateMessage(m.get(), rng, mutate_bytes);
      if (kind.text_format) {
        google::protobuf::TextFormat::PrintToString(*m, &p);
      } else {
        p = m->SerializeAsString();
      }
      break;
    }
  }
  ScriptWriter w;
  for (size_t k = 0; k < setup_bytes; ++k) w.Setup(data[k]);
  for (const auto& [op, payload] : records) {
    if (payload.size() > 0xffff) return 0;
    w.Add(op, payload);
  }
  if (w.bytes().size() > max_size) return 0;
  std::memcpy(data, w.bytes().data(), w.bytes().size());
  return w.bytes().size();
}

}  // namespace fuzz
}  // namespace bertps

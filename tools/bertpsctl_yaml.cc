// bertpsctl's structured output: JSON as given, or the same document as YAML
// (yaml-cpp's emitter: block style, keys in their order, strings
// double-quoted so that no value changes type, e.g. a job name "123").
#include <ostream>
#include <string>

#include "nlohmann/json.hpp"
#include "tools/bertpsctl_internal.h"
#include "yaml-cpp/yaml.h"

namespace bertps {
namespace ctl {
namespace internal {
namespace {

void Emit(const nlohmann::ordered_json& j, YAML::Emitter& e) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object:
      e << YAML::BeginMap;
      for (auto it = j.begin(); it != j.end(); ++it) {
        e << YAML::Key << it.key() << YAML::Value;
        Emit(it.value(), e);
      }
      e << YAML::EndMap;
      break;
    case nlohmann::ordered_json::value_t::array:
      e << YAML::BeginSeq;
      for (const auto& v : j) Emit(v, e);
      e << YAML::EndSeq;
      break;
    case nlohmann::ordered_json::value_t::string:
      e << YAML::DoubleQuoted << j.get<std::string>();
      break;
    case nlohmann::ordered_json::value_t::boolean:
      e << j.get<bool>();
      break;
    case nlohmann::ordered_json::value_t::number_integer:
      e << j.get<int64_t>();
      break;
    case nlohmann::ordered_json::value_t::number_unsigned:
      e << j.get<uint64_t>();
      break;
    case nlohmann::ordered_json::value_t::number_float:
      e << j.dump();  // JSON's shortest round-trip text, valid YAML
      break;
    default:
      e << YAML::Null;
  }
}

}  // namespace

std::string JsonToYaml(const std::string& json_text) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return json_text;  // not ours to fix: show it
  YAML::Emitter e;
  Emit(j, e);
  return std::string(e.c_str()) + "\n";
}

void PrintStructured(const CtlOptions& o, const std::string& json_text,
                     std::ostream& out) {
  if (o.yaml) {
    out << JsonToYaml(json_text);
  } else {
    out << json_text << "\n";
  }
}

}  // namespace internal
}  // namespace ctl
}  // namespace bertps

// Who can read which Secret key, and who can connect to which port, in the
// Kubernetes base (deploy/k8s/base), read from its YAML files: no kubectl,
// no kustomize, so it runs everywhere (//tests:k8s_test renders and
// schema-checks the same files where kubectl with kustomize v5 exists).
//
// For each pod template (Deployment, StatefulSet, Job, ...) the test works
// out the Secret keys the pod can read (secret and projected volumes, with or
// without items; env secretKeyRef; envFrom secretRef), with the keys of each
// Secret and what they hold taken from deploy/k8s/secret.example.yaml, and
// the files each container sees where. Then:
//   - only the submit Job reads the admin token (and the coordinator, in the
//     token list it checks callers against);
//   - only the coordinator and the shards read a token list or a key a
//     server serves with; worker pods read neither;
//   - a pod reads no key that none of its flags names, and every
//     --tls_*/--token_file/--auth_tokens_file path a container passes is a
//     key mounted in that container;
//   - Secret files are at most 0440, readable by the non-root user through
//     the pod's fsGroup;
//   - the coordinator confines jobs to roots on the data volume, and every
//     example JobSpec's paths are absolute under them;
//   - every pod is isolated by a NetworkPolicy, and the policies let exactly
//     the expected peers reach each named port (evaluated with Kubernetes'
//     rules over the pods' labels and a few stand-in peers);
//   - the overlays change nothing of that;
//   - tools/k8s_secrets.sh makes exactly the Secrets of the example, each key
//     from the right file (the admin token nowhere else).
// BERTPS_K8S_DIR points the test at another copy of deploy/k8s (to check it
// against older manifests).
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace bertps {
namespace {

namespace fs = std::filesystem;
using Labels = std::map<std::string, std::string>;

constexpr char kAdminMarker[] = "REPLACE-WITH-ADMIN-TOKEN";
constexpr char kPartOf[] = "app.kubernetes.io/part-of";
constexpr char kComponent[] = "app.kubernetes.io/component";

std::string K8sDir() {
  const char* d = std::getenv("BERTPS_K8S_DIR");
  return d != nullptr && *d != '\0' ? d : "deploy/k8s";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Str(const YAML::Node& n) {
  return n.IsDefined() && n.IsScalar() ? n.Scalar() : "";
}

// n[k1][k2]..., or an undefined node where a key is missing. (yaml-cpp
// throws on a lookup in a missing node, and assigning one Node to another
// rebinds shared data: nodes are only ever copied or reset here.)
YAML::Node Get(const YAML::Node& n, std::initializer_list<const char*> path) {
  YAML::Node cur(n);
  for (const char* k : path) {
    if (!cur.IsDefined() || !cur.IsMap())
      return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& c = cur;
    const YAML::Node next = c[k];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    cur.reset(next);
  }
  return cur;
}

// A YAML 1.1 integer as Kubernetes reads it (0440 is octal).
int Int(const YAML::Node& n, int fallback) {
  if (!n.IsDefined() || !n.IsScalar()) return fallback;
  const std::string s = n.Scalar();
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
    return static_cast<int>(std::stol(s.substr(2), nullptr, 8));
  }
  if (s.size() > 1 && s[0] == '0')
    return static_cast<int>(std::stol(s, nullptr, 8));
  return static_cast<int>(std::stol(s));
}

std::string Octal(int mode) {
  char b[16];
  std::snprintf(b, sizeof b, "0%o", mode);
  return b;
}

Labels LabelMap(const YAML::Node& n) {
  Labels l;
  if (n.IsDefined() && n.IsMap()) {
    for (const auto& kv : n) l[kv.first.Scalar()] = Str(kv.second);
  }
  return l;
}

// A LabelSelector; null or absent selects everything.
bool Selects(const YAML::Node& sel, const Labels& labels) {
  if (!sel.IsDefined() || sel.IsNull()) return true;
  for (const auto& [k, v] : LabelMap(sel["matchLabels"])) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  if (sel["matchExpressions"].IsDefined()) {
    for (const YAML::Node& e : sel["matchExpressions"]) {
      const std::string key = Str(e["key"]), op = Str(e["operator"]);
      auto it = labels.find(key);
      bool in = false;
      if (it != labels.end() && e["values"].IsDefined()) {
        for (const YAML::Node& v : e["values"])
          in = in || v.Scalar() == it->second;
      }
      if (op == "In" && !in) return false;
      if (op == "NotIn" && in) return false;
      if (op == "Exists" && it == labels.end()) return false;
      if (op == "DoesNotExist" && it != labels.end()) return false;
    }
  }
  return true;
}

// ------------------------------------------------------------- the model

struct SecretKey {
  std::string secret, key;
  bool operator<(const SecretKey& o) const {
    return std::tie(secret, key) < std::tie(o.secret, o.key);
  }
  bool operator==(const SecretKey& o) const {
    return secret == o.secret && key == o.key;
  }
  std::string Name() const { return secret + "/" + key; }
};

struct FlagPath {
  std::string flag, path;
};

struct Port {
  std::string name, protocol;
  int number = 0;
};

struct Container {
  std::string name;
  std::vector<std::string> command_lines;  // the container's, then probes'
  std::map<std::string, SecretKey> files;  // path in the container -> key
  std::vector<FlagPath> flags;             // file flags of every line
  std::vector<Port> ports;
  std::vector<std::string> probe_kinds;  // exec, grpc, httpGet, tcpSocket
};

struct Pod {
  std::string id;  // Kind/name
  Labels labels;
  YAML::Node spec;
  std::vector<Container> containers;
  std::set<SecretKey> readable;
  std::vector<std::string> problems;  // references that do not resolve
  std::string Component() const {
    auto it = labels.find(kComponent);
    return it == labels.end() ? "" : it->second;
  }
  bool IsWorker() const {
    const std::string c = Component();
    return c.size() > 7 && c.compare(c.size() - 7, 7, "-worker") == 0;
  }
  bool IsServer() const {
    return Component() == "coordinator" || Component() == "parameter-server";
  }
};

struct Manifests {
  std::string dir;
  YAML::Node kustomization;
  std::vector<std::pair<std::string, YAML::Node>> docs;  // file, object
  std::map<std::string, std::map<std::string, std::string>> secrets;
  std::vector<Pod> pods;
  std::vector<YAML::Node> policies;
  std::vector<std::string> problems;
};

YAML::Node PodTemplate(const YAML::Node& d) {
  const std::string kind = Str(d["kind"]);
  if (kind == "Pod") return d;
  if (kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet" ||
      kind == "ReplicaSet" || kind == "Job") {
    return Get(d, {"spec", "template"});
  }
  if (kind == "CronJob")
    return Get(d, {"spec", "jobTemplate", "spec", "template"});
  return YAML::Node(YAML::NodeType::Undefined);
}

// Every --FLAG=PATH or --FLAG PATH of the flags that name secret files.
std::vector<FlagPath> FileFlags(const std::string& line) {
  static const std::regex re(
      R"re(--(tls_ca|tls_cert|tls_key|token_file|auth_tokens_file|capability_key)(?:=|\s+)["']?([^\s"';&|)]+))re");
  std::vector<FlagPath> out;
  for (std::sregex_iterator it(line.begin(), line.end(), re), end; it != end;
       ++it) {
    out.push_back({(*it)[1].str(), (*it)[2].str()});
  }
  return out;
}

std::string Join(const YAML::Node& words) {
  std::string s;
  if (!words.IsDefined()) return s;
  for (const YAML::Node& w : words) s += Str(w) + " ";
  return s;
}

// The keys a secret or projected-volume source exposes: path -> key.
std::map<std::string, SecretKey> SourceFiles(
    const Manifests& m, const std::string& secret, const YAML::Node& items,
    std::vector<std::string>* problems) {
  std::map<std::string, SecretKey> files;
  auto known = m.secrets.find(secret);
  if (known == m.secrets.end()) {
    problems->push_back("Secret " + secret + " is not in secret.example.yaml");
    return files;
  }
  if (items.IsDefined() && items.size() > 0) {
    for (const YAML::Node& i : items) {
      const std::string key = Str(i["key"]);
      if (!known->second.count(key)) {
        problems->push_back("Secret " + secret + " has no key " + key);
      }
      files[Str(i["path"])] = {secret, key};
    }
  } else {
    for (const auto& kv : known->second) files[kv.first] = {secret, kv.first};
  }
  return files;
}

Pod MakePod(const Manifests& m, const std::string& id, const YAML::Node& tpl,
            const Labels& extra_labels) {
  Pod p;
  p.id = id;
  p.labels = LabelMap(Get(tpl, {"metadata", "labels"}));
  for (const auto& kv : extra_labels) p.labels[kv.first] = kv.second;
  p.spec.reset(Get(tpl, {"spec"}));
  // Volume name -> the files it holds (path in the volume -> key).
  std::map<std::string, std::map<std::string, SecretKey>> volumes;
  if (p.spec["volumes"].IsDefined()) {
    for (const YAML::Node& v : p.spec["volumes"]) {
      std::map<std::string, SecretKey>& files = volumes[Str(v["name"])];
      if (v["secret"].IsDefined()) {
        files = SourceFiles(m, Str(Get(v, {"secret", "secretName"})),
                            Get(v, {"secret", "items"}), &p.problems);
      }
      if (v["projected"].IsDefined() &&
          Get(v, {"projected", "sources"}).IsDefined()) {
        for (const YAML::Node& src : Get(v, {"projected", "sources"})) {
          if (!src["secret"].IsDefined()) continue;
          for (const auto& kv :
               SourceFiles(m, Str(Get(src, {"secret", "name"})),
                           Get(src, {"secret", "items"}), &p.problems)) {
            files[kv.first] = kv.second;
          }
        }
      }
      for (const auto& kv : files) p.readable.insert(kv.second);
    }
  }
  for (const char* list : {"initContainers", "containers"}) {
    if (!p.spec[list].IsDefined()) continue;
    for (const YAML::Node& c : p.spec[list]) {
      Container k;
      k.name = Str(c["name"]);
      k.command_lines.push_back(Join(c["command"]) + Join(c["args"]));
      for (const char* probe :
           {"livenessProbe", "readinessProbe", "startupProbe"}) {
        const YAML::Node pr = c[probe];
        if (!pr.IsDefined()) continue;
        for (const char* kind : {"exec", "grpc", "httpGet", "tcpSocket"}) {
          if (pr[kind].IsDefined()) k.probe_kinds.push_back(kind);
        }
        if (pr["exec"].IsDefined())
          k.command_lines.push_back(Join(Get(pr, {"exec", "command"})));
      }
      for (const std::string& line : k.command_lines) {
        for (const FlagPath& f : FileFlags(line)) k.flags.push_back(f);
      }
      if (c["volumeMounts"].IsDefined()) {
        for (const YAML::Node& vm : c["volumeMounts"]) {
          auto v = volumes.find(Str(vm["name"]));
          if (v == volumes.end()) continue;
          const std::string mount = Str(vm["mountPath"]);
          const std::string sub = Str(vm["subPath"]);
          for (const auto& [rel, key] : v->second) {
            if (!sub.empty()) {
              if (rel == sub) k.files[mount] = key;
            } else {
              k.files[mount + "/" + rel] = key;
            }
          }
        }
      }
      if (c["env"].IsDefined()) {
        for (const YAML::Node& e : c["env"]) {
          const YAML::Node ref = Get(e, {"valueFrom", "secretKeyRef"});
          if (ref.IsDefined())
            p.readable.insert({Str(ref["name"]), Str(ref["key"])});
        }
      }
      if (c["envFrom"].IsDefined()) {
        for (const YAML::Node& e : c["envFrom"]) {
          if (!e["secretRef"].IsDefined()) continue;
          for (const auto& kv :
               SourceFiles(m, Str(Get(e, {"secretRef", "name"})), YAML::Node(),
                           &p.problems)) {
            p.readable.insert(kv.second);
          }
        }
      }
      if (c["ports"].IsDefined()) {
        for (const YAML::Node& port : c["ports"]) {
          Port q;
          q.name = Str(port["name"]);
          q.number = Int(port["containerPort"], 0);
          q.protocol =
              port["protocol"].IsDefined() ? Str(port["protocol"]) : "TCP";
          k.ports.push_back(q);
        }
      }
      p.containers.push_back(k);
    }
  }
  return p;
}

Manifests Load(const std::string& dir) {
  Manifests m;
  m.dir = dir;
  for (const YAML::Node& d :
       YAML::LoadAll(ReadFile(dir + "/secret.example.yaml"))) {
    if (!d.IsDefined() || d.IsNull() || Str(d["kind"]) != "Secret") continue;
    auto& keys = m.secrets[Str(Get(d, {"metadata", "name"}))];
    for (const char* field : {"data", "stringData"}) {
      if (!d[field].IsDefined()) continue;
      for (const auto& kv : d[field]) keys[kv.first.Scalar()] = Str(kv.second);
    }
  }
  const std::string base = dir + "/base";
  m.kustomization = YAML::LoadFile(base + "/kustomization.yaml");
  // Labels the kustomization puts on pod templates.
  Labels template_labels;
  if (m.kustomization["labels"].IsDefined()) {
    for (const YAML::Node& l : m.kustomization["labels"]) {
      if (l["includeTemplates"].IsDefined() &&
          l["includeTemplates"].as<bool>()) {
        for (const auto& kv : LabelMap(l["pairs"]))
          template_labels[kv.first] = kv.second;
      }
    }
  }
  if (m.kustomization["resources"].IsDefined()) {
    for (const YAML::Node& r : m.kustomization["resources"]) {
      const std::string file = base + "/" + r.Scalar();
      if (!fs::is_regular_file(file)) {
        m.problems.push_back("resource " + r.Scalar() +
                             " is not a file of the base");
        continue;
      }
      for (const YAML::Node& d : YAML::LoadAll(ReadFile(file))) {
        if (d.IsDefined() && !d.IsNull()) m.docs.push_back({r.Scalar(), d});
      }
    }
  }
  for (const auto& [file, d] : m.docs) {
    const YAML::Node tpl = PodTemplate(d);
    if (tpl.IsDefined()) {
      m.pods.push_back(
          MakePod(m, Str(d["kind"]) + "/" + Str(Get(d, {"metadata", "name"})),
                  tpl, template_labels));
    }
    if (Str(d["kind"]) == "NetworkPolicy") m.policies.push_back(d);
  }
  return m;
}

const Pod* FindPod(const Manifests& m, const std::string& component) {
  for (const Pod& p : m.pods) {
    if (p.Component() == component) return &p;
  }
  return nullptr;
}

// Which kind of material a key holds, from the example's placeholders.
bool HasAdminToken(const std::string& value) {
  return value.find(kAdminMarker) != std::string::npos;
}
bool IsTokenList(const std::string& value) {
  std::istringstream in(value);
  std::string role, token;
  while (in >> role) {
    if ((role == "worker" || role == "admin") && (in >> token)) return true;
    std::getline(in, token);
  }
  return false;
}

std::string Content(const Manifests& m, const SecretKey& k) {
  auto s = m.secrets.find(k.secret);
  if (s == m.secrets.end()) return "";
  auto v = s->second.find(k.key);
  return v == s->second.end() ? "" : v->second;
}

// The keys that the coordinator or a shard serves with (--tls_key).
std::set<SecretKey> ServerKeys(const Manifests& m) {
  std::set<SecretKey> keys;
  for (const Pod& p : m.pods) {
    if (!p.IsServer()) continue;
    for (const Container& c : p.containers) {
      for (const FlagPath& f : c.flags) {
        auto it = c.files.find(f.path);
        if (f.flag == "tls_key" && it != c.files.end()) keys.insert(it->second);
      }
    }
  }
  return keys;
}

// The key a container's flag names, or null.
const SecretKey* FlagKey(const Container& c, const std::string& flag) {
  for (const FlagPath& f : c.flags) {
    auto it = c.files.find(f.path);
    if (f.flag == flag && it != c.files.end()) return &it->second;
  }
  return nullptr;
}

class K8sBase : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::is_regular_file(K8sDir() + "/base/kustomization.yaml"))
        << "no " << K8sDir() << "/base/kustomization.yaml";
    m_ = Load(K8sDir());
    ASSERT_GE(m_.pods.size(), 6u)
        << "coordinator, shards, 3 worker pools, submit Job";
    for (const char* c : {"coordinator", "parameter-server", "train-worker",
                          "preprocess-worker", "eval-worker", "client"}) {
      ASSERT_NE(FindPod(m_, c), nullptr)
          << "no pod template with " << kComponent << "=" << c;
    }
  }
  Manifests m_;
};

// ---------------------------------------------------------------- secrets

TEST_F(K8sBase, EveryFileOfTheBaseIsAResource) {
  std::set<std::string> listed;
  for (const YAML::Node& r : m_.kustomization["resources"])
    listed.insert(r.Scalar());
  std::set<std::string> generated;
  if (m_.kustomization["configMapGenerator"].IsDefined()) {
    for (const YAML::Node& g : m_.kustomization["configMapGenerator"]) {
      for (const YAML::Node& f : g["files"]) generated.insert(f.Scalar());
    }
  }
  for (const auto& e : fs::directory_iterator(m_.dir + "/base")) {
    const std::string name = e.path().filename().string();
    if (name == "kustomization.yaml" || generated.count(name)) continue;
    EXPECT_TRUE(listed.count(name))
        << name << " is not in the base's resources";
  }
  for (const std::string& p : m_.problems) ADD_FAILURE() << p;
  // Kustomize's commonLabels would rewrite the NetworkPolicies' selectors,
  // which this test does not model.
  EXPECT_FALSE(m_.kustomization["commonLabels"].IsDefined());
}

TEST_F(K8sBase, EverySecretAPodNamesIsInTheExample) {
  for (const Pod& p : m_.pods) {
    for (const std::string& problem : p.problems)
      ADD_FAILURE() << p.id << ": " << problem;
  }
}

TEST_F(K8sBase, OnlyTheSubmitJobReadsTheAdminToken) {
  int client_reads = 0;
  for (const Pod& p : m_.pods) {
    for (const SecretKey& k : p.readable) {
      const std::string v = Content(m_, k);
      if (!HasAdminToken(v)) continue;
      if (p.Component() == "client" && !IsTokenList(v)) {
        ++client_reads;
        continue;
      }
      // The coordinator checks admin tokens: its accepted-tokens file, and
      // only that, may hold one.
      bool its_token_list = false;
      if (p.Component() == "coordinator") {
        for (const Container& c : p.containers) {
          const SecretKey* list = FlagKey(c, "auth_tokens_file");
          its_token_list = its_token_list || (list != nullptr && *list == k);
        }
      }
      if (!its_token_list) {
        ADD_FAILURE() << p.id << " can read the admin token (" << k.Name()
                      << ")";
      }
    }
  }
  EXPECT_GE(client_reads, 1) << "the submit Job cannot read the admin token";
}

TEST_F(K8sBase, OnlyServersReadTokenListsAndServerKeys) {
  const std::set<SecretKey> server_keys = ServerKeys(m_);
  ASSERT_FALSE(server_keys.empty()) << "no server passes --tls_key";
  for (const Pod& p : m_.pods) {
    if (p.IsServer()) continue;
    for (const SecretKey& k : p.readable) {
      if (IsTokenList(Content(m_, k))) {
        ADD_FAILURE() << p.id << " can read the token list " << k.Name();
      }
      if (server_keys.count(k)) {
        ADD_FAILURE() << p.id << " can read the servers' private key "
                      << k.Name();
      }
    }
  }
}

TEST_F(K8sBase, ShardsAcceptNoAdminToken) {
  // Nothing calls a shard with an admin token; a shard's token list holds
  // worker tokens only.
  const Pod* ps = FindPod(m_, "parameter-server");
  ASSERT_NE(ps, nullptr);
  for (const SecretKey& k : ps->readable) {
    if (HasAdminToken(Content(m_, k))) {
      ADD_FAILURE() << ps->id << " can read the admin token (" << k.Name()
                    << ")";
    }
  }
}

TEST_F(K8sBase, PodsReadOnlyWhatTheirFlagsName) {
  for (const Pod& p : m_.pods) {
    std::set<SecretKey> used;
    for (const Container& c : p.containers) {
      for (const FlagPath& f : c.flags) {
        auto it = c.files.find(f.path);
        if (it == c.files.end()) {
          ADD_FAILURE() << p.id << " container " << c.name << ": --" << f.flag
                        << "=" << f.path
                        << " is no Secret key mounted in that container";
        } else {
          used.insert(it->second);
        }
      }
    }
    for (const SecretKey& k : p.readable) {
      if (!used.count(k)) {
        ADD_FAILURE() << p.id << " can read " << k.Name()
                      << ", which none of its flags names";
      }
    }
  }
}

TEST_F(K8sBase, EachRolePassesItsCredentials) {
  for (const Pod& p : m_.pods) {
    ASSERT_FALSE(p.containers.empty()) << p.id;
    const Container& c = p.containers.back();
    for (const char* flag : {"tls_ca", "tls_cert", "tls_key"}) {
      EXPECT_NE(FlagKey(c, flag), nullptr) << p.id << " passes no --" << flag;
    }
    const SecretKey* token = FlagKey(c, "token_file");
    const SecretKey* accepted = FlagKey(c, "auth_tokens_file");
    if (p.Component() == "client") {
      ASSERT_NE(token, nullptr) << p.id;
      EXPECT_TRUE(HasAdminToken(Content(m_, *token)))
          << p.id << " sends no admin token";
    } else if (p.Component() != "coordinator") {
      ASSERT_NE(token, nullptr) << p.id << " sends no token";
      EXPECT_FALSE(HasAdminToken(Content(m_, *token))) << p.id;
    }
    if (p.IsServer()) {
      ASSERT_NE(accepted, nullptr) << p.id << " checks no tokens";
      EXPECT_TRUE(IsTokenList(Content(m_, *accepted))) << p.id;
      const std::string line = c.command_lines.front();
      EXPECT_NE(line.find("--tls_require_client_cert"), std::string::npos)
          << p.id;
    } else {
      EXPECT_EQ(accepted, nullptr) << p.id << " has a token list";
    }
  }
}

TEST_F(K8sBase, SecretFilesAreReadableOnlyByTheDaemon) {
  for (const Pod& p : m_.pods) {
    const YAML::Node sc = p.spec["securityContext"];
    const int uid = Int(sc["runAsUser"], 0);
    EXPECT_TRUE(sc["runAsNonRoot"].IsDefined() && sc["runAsNonRoot"].as<bool>())
        << p.id;
    EXPECT_NE(uid, 0) << p.id;
    // Secret files are owned by root; the daemon reads them through its
    // group, the pod's fsGroup.
    const bool fs_group = sc["fsGroup"].IsDefined();
    std::vector<int> modes;
    for (const YAML::Node& v : p.spec["volumes"]) {
      YAML::Node items(YAML::NodeType::Undefined);
      if (v["secret"].IsDefined()) {
        modes.push_back(Int(Get(v, {"secret", "defaultMode"}), 0644));
        items.reset(Get(v, {"secret", "items"}));
      } else if (v["projected"].IsDefined()) {
        modes.push_back(Int(Get(v, {"projected", "defaultMode"}), 0644));
        for (const YAML::Node& s : Get(v, {"projected", "sources"})) {
          if (s["secret"].IsDefined() &&
              Get(s, {"secret", "items"}).IsDefined()) {
            for (const YAML::Node& i : Get(s, {"secret", "items"})) {
              if (i["mode"].IsDefined()) modes.push_back(Int(i["mode"], 0));
            }
          }
        }
      } else {
        continue;
      }
      if (items.IsDefined()) {
        for (const YAML::Node& i : items) {
          if (i["mode"].IsDefined()) modes.push_back(Int(i["mode"], 0));
        }
      }
    }
    for (int mode : modes) {
      EXPECT_EQ(mode & ~0440, 0)
          << p.id << ": Secret mode " << Octal(mode)
          << " allows more than reading by owner and group";
      EXPECT_TRUE((mode & 0040) != 0 && fs_group)
          << p.id << ": Secret mode " << Octal(mode)
          << " with the files owned by root: uid " << uid
          << " needs group read and an fsGroup";
    }
  }
}

// ---------------------------------------------------------------- paths

struct Roots {
  std::string data, output, jobs;
};

bool Under(const std::string& path, const std::string& root) {
  return !root.empty() && path.compare(0, root.size() + 1, root + "/") == 0 &&
         path.find("/../") == std::string::npos &&
         path.find("/./") == std::string::npos;
}

Roots CoordinatorRoots(const Manifests& m) {
  Roots r;
  const Pod* p = FindPod(m, "coordinator");
  if (p == nullptr) return r;
  static const std::regex re(R"(--(data_root|output_root|jobs_root)=(\S+))");
  for (const Container& c : p->containers) {
    const std::string& line = c.command_lines.front();
    for (std::sregex_iterator it(line.begin(), line.end(), re), end; it != end;
         ++it) {
      const std::string flag = (*it)[1], value = (*it)[2];
      (flag == "data_root"     ? r.data
       : flag == "output_root" ? r.output
                               : r.jobs) = value;
    }
  }
  return r;
}

TEST_F(K8sBase, CoordinatorConfinesJobsToTheDataVolume) {
  const Roots r = CoordinatorRoots(m_);
  ASSERT_FALSE(r.data.empty()) << "the coordinator runs without --data_root";
  ASSERT_FALSE(r.output.empty())
      << "the coordinator runs without --output_root";
  ASSERT_FALSE(r.jobs.empty()) << "the coordinator runs without --jobs_root";
  EXPECT_TRUE(Under(r.jobs, r.output))
      << r.jobs << " is not under " << r.output;
  // Every root lies on the volume that the workers and shards share.
  const Pod* coordinator = FindPod(m_, "coordinator");
  std::string shared_claim;
  for (const YAML::Node& v : FindPod(m_, "train-worker")->spec["volumes"]) {
    if (v["persistentVolumeClaim"].IsDefined()) {
      shared_claim = Str(Get(v, {"persistentVolumeClaim", "claimName"}));
    }
  }
  ASSERT_FALSE(shared_claim.empty())
      << "the train workers mount no volume claim";
  std::string mount;
  for (const YAML::Node& v : coordinator->spec["volumes"]) {
    if (Str(Get(v, {"persistentVolumeClaim", "claimName"})) != shared_claim)
      continue;
    for (const YAML::Node& c : coordinator->spec["containers"]) {
      for (const YAML::Node& vm : c["volumeMounts"]) {
        if (Str(vm["name"]) == Str(v["name"])) mount = Str(vm["mountPath"]);
      }
    }
  }
  ASSERT_FALSE(mount.empty())
      << "the coordinator does not mount " << shared_claim;
  for (const std::string& root : {r.data, r.output, r.jobs}) {
    EXPECT_TRUE(Under(root, mount))
        << root << " is not on the volume at " << mount;
  }
}

// (field path, value) of every string in a text-format protobuf.
std::vector<std::pair<std::string, std::string>> PbtxtStrings(
    const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> scope;
  std::string last_ident;
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    if (ch == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') {
      size_t j = i;
      while (
          j < text.size() &&
          (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
        ++j;
      last_ident = text.substr(i, j - i);
      i = j;
    } else if (ch == '{') {
      scope.push_back(last_ident);
      ++i;
    } else if (ch == '}') {
      if (!scope.empty()) scope.pop_back();
      ++i;
    } else if (ch == '"') {
      size_t j = i + 1;
      std::string v;
      while (j < text.size() && text[j] != '"') {
        if (text[j] == '\\' && j + 1 < text.size()) ++j;
        v += text[j++];
      }
      std::string field;
      for (const std::string& s : scope) field += s + ".";
      out.push_back({field + last_ident, v});
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

// The example JobSpecs: the base's and each overlay's job.pbtxt.
std::vector<std::string> JobSpecFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".pbtxt") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST_F(K8sBase, ExampleSpecsUseAbsolutePathsUnderTheRoots) {
  const Roots r = CoordinatorRoots(m_);
  // common/cluster/path_policy.cc's fields.
  const std::set<std::string> inputs = {"data",
                                        "eval.data",
                                        "model",
                                        "init_weights",
                                        "eval_checkpoint",
                                        "checkpoint.restore",
                                        "preprocess.vocab",
                                        "vocab",
                                        "preprocess.augment.wordnet_dir"};
  const std::set<std::string> outputs = {
      "checkpoint.dir",  "export_path",          "output_dir",
      "tensorboard_dir", "eval.predictions_dir", "job_dir"};
  const std::vector<std::string> specs = JobSpecFiles(m_.dir);
  ASSERT_GE(specs.size(), 2u) << "the base's and the local overlay's job.pbtxt";
  for (const std::string& file : specs) {
    int paths = 0;
    for (const auto& [field, value] : PbtxtStrings(ReadFile(file))) {
      const bool is_input = inputs.count(field) > 0,
                 is_output = outputs.count(field) > 0;
      if (field == "model" && value.find('/') == std::string::npos &&
          value.find(".json") == std::string::npos) {
        continue;  // a preset name
      }
      if (!is_input && !is_output) {
        EXPECT_EQ(value.find('/'), std::string::npos)
            << file << ": " << field << " \"" << value
            << "\" looks like a path in a field this test does not know";
        continue;
      }
      ++paths;
      if (is_output) {
        if (!Under(value, r.output)) {
          ADD_FAILURE() << file << ": " << field << " \"" << value
                        << "\" is not under --output_root " << r.output;
        }
      } else {
        if (!Under(value, r.data) && !Under(value, r.output)) {
          ADD_FAILURE() << file << ": " << field << " \"" << value
                        << "\" is not under --data_root " << r.data
                        << " or --output_root " << r.output;
        }
      }
      // Glob characters only in the last component.
      const size_t slash = value.rfind('/');
      const std::string dirs =
          value.substr(0, slash == std::string::npos ? 0 : slash);
      if (dirs.find_first_of("*?[") != std::string::npos) {
        ADD_FAILURE() << file << ": " << field << " \"" << value
                      << "\" has glob characters before its last component";
      }
    }
    EXPECT_GE(paths, 2) << file << ": expected data and outputs";
  }
}

// -------------------------------------------------------------- overlays

// Fields that would change what a pod reads, runs, or who reaches it.
const std::set<std::string>& GuardedFields() {
  static const std::set<std::string> f = {"volumes",
                                          "volumeMounts",
                                          "env",
                                          "envFrom",
                                          "command",
                                          "args",
                                          "labels",
                                          "securityContext",
                                          "podSelector",
                                          "ingress",
                                          "egress",
                                          "policyTypes",
                                          "namespaceSelector",
                                          "livenessProbe",
                                          "readinessProbe",
                                          "startupProbe",
                                          "ports"};
  return f;
}

void FindGuarded(const YAML::Node& n, const std::string& where,
                 std::vector<std::string>* found) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string key = kv.first.Scalar();
      if (GuardedFields().count(key)) found->push_back(where + "/" + key);
      // A JSON patch operation names its target in `path`.
      if (key == "path" && kv.second.IsScalar()) {
        for (const std::string& g : GuardedFields()) {
          if (kv.second.Scalar().find("/" + g) != std::string::npos) {
            found->push_back(where + " path " + kv.second.Scalar());
          }
        }
      }
      FindGuarded(kv.second, where + "/" + key, found);
    }
  } else if (n.IsSequence()) {
    for (const YAML::Node& e : n) FindGuarded(e, where, found);
  }
}

TEST_F(K8sBase, OverlaysChangeNoSecretPathOrPolicy) {
  int overlays = 0;
  for (const auto& e : fs::directory_iterator(m_.dir + "/overlays")) {
    const std::string dir = e.path().string();
    const std::string name = e.path().filename().string();
    if (!fs::is_regular_file(dir + "/kustomization.yaml")) continue;
    ++overlays;
    const YAML::Node k = YAML::LoadFile(dir + "/kustomization.yaml");
    for (const char* field : {"labels", "commonLabels", "components",
                              "patchesJson6902", "patchesStrategicMerge"}) {
      EXPECT_FALSE(k[field].IsDefined())
          << "overlay " << name << " uses " << field
          << ", which this test does not model";
    }
    for (const YAML::Node& r : k["resources"]) {
      EXPECT_TRUE(fs::is_directory(dir + "/" + r.Scalar()))
          << "overlay " << name << " adds " << r.Scalar()
          << ": only kustomizations (the base) are modelled";
    }
    std::vector<std::string> found;
    if (k["patches"].IsDefined()) {
      for (const YAML::Node& p : k["patches"]) {
        if (p["path"].IsDefined()) {
          for (const YAML::Node& d :
               YAML::LoadAll(ReadFile(dir + "/" + Str(p["path"])))) {
            FindGuarded(d, name + "/" + Str(p["path"]), &found);
          }
        }
        if (p["patch"].IsDefined()) {
          for (const YAML::Node& d : YAML::LoadAll(Str(p["patch"]))) {
            FindGuarded(d, name + " inline patch", &found);
          }
        }
      }
    }
    for (const std::string& f : found) {
      ADD_FAILURE() << "overlay " << name << " changes " << f
                    << ": extend tests/k8s_access_test.cc to check the result";
    }
  }
  EXPECT_GE(overlays, 1);
}

// -------------------------------------------------------- network policies

struct Peer {
  std::string name;
  Labels labels, namespace_labels;
  bool same_namespace = true;
};

constexpr char kNamespaceLabel[] = "kubernetes.io/metadata.name";

bool PeerMatches(const YAML::Node& from, const Peer& src) {
  if (from["ipBlock"].IsDefined()) return true;  // not modelled: assume it may
  const YAML::Node ps = from["podSelector"], ns = from["namespaceSelector"];
  if (ns.IsDefined()) {
    return Selects(ns, src.namespace_labels) &&
           (!ps.IsDefined() || Selects(ps, src.labels));
  }
  return src.same_namespace && Selects(ps, src.labels);
}

bool PortMatches(const YAML::Node& rule_port, const Port& port) {
  const std::string protocol =
      rule_port["protocol"].IsDefined() ? Str(rule_port["protocol"]) : "TCP";
  if (protocol != port.protocol) return false;
  const YAML::Node p = rule_port["port"];
  if (!p.IsDefined()) return true;
  const std::string v = Str(p);
  if (!v.empty() && !std::isdigit(static_cast<unsigned char>(v[0])))
    return v == port.name;
  const int lo = Int(p, 0), hi = Int(rule_port["endPort"], lo);
  return port.number >= lo && port.number <= hi;
}

bool IngressPolicy(const YAML::Node& policy) {
  const YAML::Node types = Get(policy, {"spec", "policyTypes"});
  if (!types.IsDefined()) return true;
  for (const YAML::Node& t : types) {
    if (t.Scalar() == "Ingress") return true;
  }
  return false;
}

bool Isolated(const std::vector<YAML::Node>& policies, const Pod& dst) {
  for (const YAML::Node& pol : policies) {
    if (IngressPolicy(pol) &&
        Selects(Get(pol, {"spec", "podSelector"}), dst.labels))
      return true;
  }
  return false;
}

bool Allowed(const std::vector<YAML::Node>& policies, const Peer& src,
             const Pod& dst, const Port& port) {
  if (!Isolated(policies, dst)) return true;
  for (const YAML::Node& pol : policies) {
    if (!IngressPolicy(pol) ||
        !Selects(Get(pol, {"spec", "podSelector"}), dst.labels))
      continue;
    const YAML::Node rules = Get(pol, {"spec", "ingress"});
    if (!rules.IsDefined()) continue;
    for (const YAML::Node& rule : rules) {
      bool from_ok = !rule["from"].IsDefined() || rule["from"].size() == 0;
      if (!from_ok) {
        for (const YAML::Node& f : rule["from"])
          from_ok = from_ok || PeerMatches(f, src);
      }
      bool port_ok = !rule["ports"].IsDefined() || rule["ports"].size() == 0;
      if (!port_ok) {
        for (const YAML::Node& p : rule["ports"])
          port_ok = port_ok || PortMatches(p, port);
      }
      if (from_ok && port_ok) return true;
    }
  }
  return false;
}

TEST_F(K8sBase, NetworkPoliciesIsolateEveryPod) {
  ASSERT_FALSE(m_.policies.empty()) << "the base has no NetworkPolicy";
  for (const Pod& p : m_.pods) {
    EXPECT_TRUE(Isolated(m_.policies, p))
        << "no ingress NetworkPolicy selects " << p.id;
  }
  for (const YAML::Node& pol : m_.policies) {
    bool selects_one = false;
    for (const Pod& p : m_.pods) {
      selects_one =
          selects_one || Selects(Get(pol, {"spec", "podSelector"}), p.labels);
    }
    EXPECT_TRUE(selects_one)
        << "NetworkPolicy " << Str(Get(pol, {"metadata", "name"}))
        << " selects no pod";
  }
}

TEST_F(K8sBase, NetworkPoliciesLetExactlyTheExpectedPeersIn) {
  const Labels app_ns = {{kNamespaceLabel, "bertps"}};
  std::vector<Peer> peers;
  for (const Pod& p : m_.pods) peers.push_back({p.id, p.labels, app_ns, true});
  // Stand-ins: a pipeline stage daemon (no pool of them in the base), an
  // operator's bertpsctl pod, an unlabelled pod of the namespace,
  // Prometheus, and a pod elsewhere with the train workers' labels.
  const Labels train = FindPod(m_, "train-worker")->labels;
  peers.push_back({"stage daemon",
                   {{kPartOf, "bertps"}, {kComponent, "stage-worker"}},
                   app_ns,
                   true});
  peers.push_back({"bertpsctl pod", {{kComponent, "client"}}, app_ns, true});
  peers.push_back({"unlabelled pod", {}, app_ns, true});
  peers.push_back({"prometheus",
                   {{"app.kubernetes.io/name", "prometheus"}},
                   {{kNamespaceLabel, "monitoring"}},
                   false});
  peers.push_back({"look-alike in another namespace",
                   train,
                   {{kNamespaceLabel, "elsewhere"}},
                   false});
  std::set<std::string> project, servers_callers;
  for (const Peer& s : peers) {
    auto part = s.labels.find(kPartOf);
    const bool ours =
        s.same_namespace && part != s.labels.end() && part->second == "bertps";
    if (ours) project.insert(s.name);
    auto c = s.labels.find(kComponent);
    const std::string comp = c == s.labels.end() ? "" : c->second;
    if (ours && (comp == "coordinator" || comp == "parameter-server" ||
                 comp == "train-worker" || comp == "stage-worker")) {
      servers_callers.insert(s.name);
    }
  }
  std::set<std::string> coordinator_callers = project;
  coordinator_callers.insert("bertpsctl pod");
  const std::set<std::string> monitoring = {"prometheus"};

  int ports = 0;
  for (const Pod& dst : m_.pods) {
    for (const Container& c : dst.containers) {
      for (const Port& port : c.ports) {
        ++ports;
        std::set<std::string> want;  // empty: nobody
        if (port.name == "metrics") want = monitoring;
        if (port.name == "grpc" && dst.Component() == "coordinator")
          want = coordinator_callers;
        if (port.name == "grpc" && dst.Component() == "parameter-server")
          want = servers_callers;
        std::set<std::string> got;
        for (const Peer& src : peers) {
          if (Allowed(m_.policies, src, dst, port)) got.insert(src.name);
        }
        std::string detail;
        for (const std::string& s : got) {
          if (!want.count(s)) detail += " [let in: " + s + "]";
        }
        for (const std::string& s : want) {
          if (!got.count(s)) detail += " [shut out: " + s + "]";
        }
        if (!detail.empty()) {
          ADD_FAILURE() << dst.id << " port " << port.name << " " << port.number
                        << ":" << detail;
        }
      }
    }
  }
  EXPECT_GE(ports, 10);
}

TEST_F(K8sBase, ProbesNeedNoIngress) {
  // Exec probes dial 127.0.0.1 inside the pod, which no policy filters; the
  // health ports stay closed to every peer.
  for (const Pod& p : m_.pods) {
    for (const Container& c : p.containers) {
      for (const std::string& kind : c.probe_kinds) {
        EXPECT_EQ(kind, "exec") << p.id << " container " << c.name;
      }
    }
  }
}

// ------------------------------------------------------ tools/k8s_secrets.sh

std::string Base64Decode(const std::string& in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    const size_t d = chars.find(c);
    if (d == std::string::npos) break;
    val = (val << 6) + static_cast<int>(d);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

struct RunResult {
  int status = -1;
  std::string output;
};

RunResult RunCommand(const std::string& command) {
  RunResult r;
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.output.append(buf, n);
  const int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t != nullptr ? t : "/tmp") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The files of tools/gen_certs.sh, each holding its own name.
std::string FakeCertDir() {
  const std::string dir = TempDir("certs");
  for (const char* f : {"ca.crt", "server.crt", "worker.crt", "client.crt"}) {
    std::ofstream(dir + "/" + f) << "-----BEGIN CERTIFICATE-----\n"
                                 << f << "\n-----END CERTIFICATE-----\n";
  }
  for (const char* f : {"server.key", "worker.key", "client.key"}) {
    std::ofstream(dir + "/" + f) << "-----BEGIN PRIVATE KEY-----\n"
                                 << f << "\n-----END PRIVATE KEY-----\n";
  }
  std::ofstream(dir + "/worker.token") << "WORKER-TOKEN-0123456789\n";
  std::ofstream(dir + "/admin.token") << "ADMIN-TOKEN-0123456789\n";
  std::ofstream(dir + "/capability.key")
      << "-----BEGIN PRIVATE KEY-----\ncapability\n-----END PRIVATE KEY-----\n";
  std::ofstream(dir + "/auth_tokens")
      << "# ROLE TOKEN\nworker WORKER-TOKEN-0123456789\n"
      << "admin ADMIN-TOKEN-0123456789\n";
  return dir;
}

TEST(K8sSecretsScript, MakesTheExampleSecretsFromTheRightFiles) {
  const std::string dir = FakeCertDir();
  const RunResult r = RunCommand("/bin/bash tools/k8s_secrets.sh " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  std::map<std::string, std::map<std::string, std::string>> made;
  for (const YAML::Node& d : YAML::LoadAll(r.output)) {
    if (!d.IsDefined() || d.IsNull()) continue;
    ASSERT_EQ(Str(d["kind"]), "Secret");
    auto& keys = made[Str(Get(d, {"metadata", "name"}))];
    for (const auto& kv : d["data"])
      keys[kv.first.Scalar()] = Base64Decode(Str(kv.second));
  }
  // The same Secrets and keys as the example that the manifests are
  // checked against.
  const Manifests m = Load(K8sDir());
  std::map<std::string, std::set<std::string>> want_keys, got_keys;
  for (const auto& [name, keys] : m.secrets) {
    for (const auto& kv : keys) want_keys[name].insert(kv.first);
  }
  for (const auto& [name, keys] : made) {
    for (const auto& kv : keys) got_keys[name].insert(kv.first);
  }
  EXPECT_EQ(got_keys, want_keys);
  // Each key from its file; the shards' token list without the admin line.
  const std::map<std::string, std::string> source = {
      {"ca.crt", "ca.crt"},          {"server.crt", "server.crt"},
      {"server.key", "server.key"},  {"worker.crt", "worker.crt"},
      {"worker.key", "worker.key"},  {"client.crt", "client.crt"},
      {"client.key", "client.key"},  {"worker.token", "worker.token"},
      {"admin.token", "admin.token"}, {"capability.key", "capability.key"}};
  for (const auto& [name, keys] : made) {
    for (const auto& [key, value] : keys) {
      if (key == "auth_tokens") {
        EXPECT_NE(value.find("worker WORKER-TOKEN"), std::string::npos) << name;
        const bool admin_ok = name == "bertps-coordinator-secrets";
        EXPECT_EQ(value.find("admin ") != std::string::npos, admin_ok)
            << name << ": " << value;
        continue;
      }
      auto it = source.find(key);
      ASSERT_NE(it, source.end()) << name << "/" << key;
      EXPECT_EQ(value, ReadFile(dir + "/" + it->second)) << name << "/" << key;
    }
  }
  // The admin token reaches two keys only.
  int admin = 0;
  for (const auto& [name, keys] : made) {
    for (const auto& [key, value] : keys) {
      if (value.find("ADMIN-TOKEN") != std::string::npos) {
        ++admin;
        EXPECT_TRUE(
            (name == "bertps-client-secrets" && key == "admin.token") ||
            (name == "bertps-coordinator-secrets" && key == "auth_tokens"))
            << name << "/" << key;
      }
    }
  }
  EXPECT_EQ(admin, 2);
  // The capability signing key reaches the coordinator's Secret only.
  for (const auto& [name, keys] : made) {
    EXPECT_EQ(keys.count("capability.key") > 0,
              name == "bertps-coordinator-secrets")
        << name;
  }
}

TEST(K8sSecretsScript, RefusesAMissingFile) {
  const std::string dir = FakeCertDir();
  fs::remove(dir + "/worker.key");
  const RunResult r = RunCommand("/bin/bash tools/k8s_secrets.sh " + dir);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("worker.key is missing"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("kind: Secret"), std::string::npos)
      << "printed a Secret anyway";
}

}  // namespace
}  // namespace bertps

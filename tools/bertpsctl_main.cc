// bertpsctl: submit, inspect, watch, cancel and plot jobs of a bertps
// coordinator. See tools/bertpsctl.h for the verbs, or `bertpsctl --help`.
//
//   bertpsctl --coordinator 127.0.0.1:7400 submit job.textproto
//   bertpsctl watch job-1
//   bertpsctl plot job-1 -o loss.svg
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/version.h"
#include "tools/bertpsctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--version") {
      std::cout << bertps::VersionLine("bertpsctl") << "\n";
      return 0;
    }
  }
  return bertps::ctl::Main(args, std::getenv("BERTPS_COORDINATOR"),
                           isatty(STDOUT_FILENO) != 0, std::cout, std::cerr);
}

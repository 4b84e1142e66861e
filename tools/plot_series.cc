// Renders line and point series given as JSON into an SVG plot
// (tools/svg_plot.h), for benchmark scripts that plot what they measured.
//
//   plot_series IN.json OUT.svg
//
// IN.json: {"title": "...", "x_label": "step", "left_label": "loss",
//           "right_label": "...", "series": [{"name": "...", "x": [...],
//           "y": [...], "axis": "left"|"right", "style": "line"|"points",
//           "color": "#rrggbb"}, ...]}
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/svg_plot.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: plot_series IN.json OUT.svg\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "plot_series: cannot read %s\n", argv[1]);
    return 1;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("series") ||
      !j["series"].is_array()) {
    std::fprintf(stderr, "plot_series: %s is not {\"series\": [...]}\n", argv[1]);
    return 1;
  }
  bertps::plot::PlotOptions o;
  o.title = j.value("title", "");
  o.x_label = j.value("x_label", "step");
  o.left_label = j.value("left_label", "");
  o.right_label = j.value("right_label", "");
  std::vector<bertps::plot::Series> series;
  for (const auto& s : j["series"]) {
    bertps::plot::Series p;
    p.name = s.value("name", "");
    p.x = s.value("x", std::vector<double>{});
    p.y = s.value("y", std::vector<double>{});
    p.color = s.value("color", "");
    if (s.value("axis", "left") == "right") p.axis = bertps::plot::Axis::kRight;
    if (s.value("style", "line") == "points") {
      p.style = bertps::plot::Style::kPoints;
    }
    series.push_back(std::move(p));
  }
  std::ofstream out(argv[2]);
  out << bertps::plot::RenderLossSvg(series, o);
  if (!out.good()) {
    std::fprintf(stderr, "plot_series: cannot write %s\n", argv[2]);
    return 1;
  }
  return 0;
}

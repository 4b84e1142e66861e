// Standalone SVG line plots of training curves (loss, learning rate, eval
// points), written without any plotting library.
//
// RenderLossSvg returns one complete SVG 1.1 document: a title, a plot area
// with x/y axes and tick labels, an optional second y axis on the right for
// series that ask for it, and a legend. A browser shows it as is.
//
// Each line series is one <path class="series" data-name=...> whose "d" has
// one M/L command per finite point (non-finite points are skipped and break
// the line); each point series is a <g class="series"> of one <circle> per
// finite point. Text is XML-escaped.
//
// Thread-safety: pure functions.
#ifndef BERTPS_TOOLS_SVG_PLOT_H_
#define BERTPS_TOOLS_SVG_PLOT_H_

#include <string>
#include <vector>

namespace bertps {
namespace plot {

enum class Axis { kLeft, kRight };
enum class Style { kLine, kPoints };

struct Series {
  std::string name;       // legend text
  std::vector<double> x;  // (N)
  std::vector<double>
      y;  // (N); pairs beyond min(x.size(), y.size()) are dropped
  Axis axis = Axis::kLeft;
  Style style = Style::kLine;
  std::string color;  // CSS color; empty: from the palette
};

struct PlotOptions {
  std::string title;
  std::string x_label = "step";
  std::string left_label = "loss";
  std::string right_label = "learning rate";
  int width = 960;   // pixels
  int height = 540;  // pixels
};

std::string RenderLossSvg(const std::vector<Series>& series,
                          const PlotOptions& options);

// "Nice" tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]
// with about `target` intervals; the first tick is <= lo and the last >= hi.
// A degenerate range (lo == hi) is widened around the value.
std::vector<double> NiceTicks(double lo, double hi, int target);

// A tick label: fixed decimals that resolve `step` (so one axis's labels
// agree), or %g for steps below 1e-6 and values of a million or more.
std::string FormatTick(double value, double step);

}  // namespace plot
}  // namespace bertps

#endif  // BERTPS_TOOLS_SVG_PLOT_H_

#include "tools/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bertps {
namespace plot {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c",
                                    "#ff7f0e", "#9467bd", "#8c564b"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string Escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string Num(double v) { return absl::StrFormat("%.2f", v); }

// Inclusive data range over the finite points of the selected series.
struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool empty() const { return lo > hi; }
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

size_t NumPairs(const Series& s) { return std::min(s.x.size(), s.y.size()); }

bool Finite(const Series& s, size_t i) {
  return std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
}

// Maps data values onto pixels along one axis; ticks define the domain.
struct Scale {
  std::vector<double> ticks;
  double d0 = 0, d1 = 1;  // domain
  double p0 = 0, p1 = 1;  // pixels (p0 maps d0)
  double operator()(double v) const {
    return p0 + (v - d0) / (d1 - d0) * (p1 - p0);
  }
};

Scale MakeScale(const Range& r, int target, double p0, double p1) {
  Scale s;
  s.ticks = r.empty() ? NiceTicks(0, 1, target) : NiceTicks(r.lo, r.hi, target);
  s.d0 = s.ticks.front();
  s.d1 = s.ticks.back();
  s.p0 = p0;
  s.p1 = p1;
  return s;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    lo = 0;
    hi = 1;
  }
  if (hi < lo) std::swap(lo, hi);
  const double scale = std::max(std::fabs(lo), std::fabs(hi));
  if (hi - lo <= 1e-12 * scale || hi == lo) {
    const double d = scale > 0 ? scale * 0.1 : 1.0;
    lo -= d;
    hi += d;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
  const double start = std::floor(lo / step + 1e-9) * step;
  const double end = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (int i = 0; i < 1000; ++i) {
    double v = start + i * step;
    if (std::fabs(v) < step * 1e-9) v = 0;
    ticks.push_back(v);
    if (v >= end - step * 1e-9) break;
  }
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string FormatTick(double value, double step) {
  if (value == 0) return "0";
  step = std::fabs(step);
  if (!(step > 0)) return absl::StrFormat("%g", value);
  if (step < 1e-6 || std::fabs(value) >= 1e6) {
    int digits = static_cast<int>(
                     std::ceil(std::log10(std::fabs(value) / step) + 1e-9)) +
                 1;
    digits = std::clamp(digits, 1, 15);
    return absl::StrFormat("%.*g", digits, value);
  }
  const int decimals =
      std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return absl::StrFormat("%.*f", decimals, value);
}

std::string RenderLossSvg(const std::vector<Series>& series,
                          const PlotOptions& options) {
  const double width = std::max(options.width, 200);
  const double height = std::max(options.height, 150);

  Range xr, left, right;
  bool has_right = false;
  for (const Series& s : series) {
    for (size_t i = 0; i < NumPairs(s); ++i) {
      if (!Finite(s, i)) continue;
      xr.Add(s.x[i]);
      if (s.axis == Axis::kRight) {
        right.Add(s.y[i]);
        has_right = true;
      } else {
        left.Add(s.y[i]);
      }
    }
  }

  const double ml = 80, mr = has_right ? 90 : 30, mt = 50, mb = 60;
  const double x0 = ml, x1 = width - mr, y0 = mt, y1 = height - mb;
  const Scale xs = MakeScale(xr, 8, x0, x1);
  const Scale ls = MakeScale(left, 6, y1, y0);
  const Scale rs = MakeScale(right, 6, y1, y0);

  std::string out;
  absl::StrAppend(&out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  absl::StrAppend(
      &out,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"",
      Num(width), "\" height=\"", Num(height), "\" viewBox=\"0 0 ", Num(width),
      " ", Num(height), "\" font-family=\"sans-serif\" font-size=\"12\">\n");
  absl::StrAppend(&out, "<title>", Escape(options.title), "</title>\n");
  absl::StrAppend(&out, "<rect x=\"0\" y=\"0\" width=\"", Num(width),
                  "\" height=\"", Num(height), "\" fill=\"white\"/>\n");
  absl::StrAppend(&out, "<text class=\"title\" x=\"", Num(width / 2),
                  "\" y=\"28\" text-anchor=\"middle\" font-size=\"18\">",
                  Escape(options.title), "</text>\n");

  if (xr.empty()) {
    absl::StrAppend(&out, "<text x=\"", Num(width / 2), "\" y=\"",
                    Num(height / 2),
                    "\" text-anchor=\"middle\" fill=\"#666\">no data</text>\n");
    absl::StrAppend(&out, "</svg>\n");
    return out;
  }

  // Grid and tick labels.
  const double xstep = xs.ticks[1] - xs.ticks[0];
  const double lstep = ls.ticks[1] - ls.ticks[0];
  const double rstep = rs.ticks[1] - rs.ticks[0];
  absl::StrAppend(&out, "<g class=\"grid\" stroke=\"#e0e0e0\">\n");
  for (double t : xs.ticks) {
    absl::StrAppend(&out, "<line x1=\"", Num(xs(t)), "\" y1=\"", Num(y0),
                    "\" x2=\"", Num(xs(t)), "\" y2=\"", Num(y1), "\"/>\n");
  }
  for (double t : ls.ticks) {
    absl::StrAppend(&out, "<line x1=\"", Num(x0), "\" y1=\"", Num(ls(t)),
                    "\" x2=\"", Num(x1), "\" y2=\"", Num(ls(t)), "\"/>\n");
  }
  absl::StrAppend(&out, "</g>\n");

  absl::StrAppend(&out, "<g class=\"axes\" stroke=\"#333\" fill=\"none\">\n");
  absl::StrAppend(&out, "<line x1=\"", Num(x0), "\" y1=\"", Num(y1), "\" x2=\"",
                  Num(x1), "\" y2=\"", Num(y1), "\"/>\n");
  absl::StrAppend(&out, "<line x1=\"", Num(x0), "\" y1=\"", Num(y0), "\" x2=\"",
                  Num(x0), "\" y2=\"", Num(y1), "\"/>\n");
  if (has_right) {
    absl::StrAppend(&out, "<line x1=\"", Num(x1), "\" y1=\"", Num(y0),
                    "\" x2=\"", Num(x1), "\" y2=\"", Num(y1), "\"/>\n");
  }
  absl::StrAppend(&out, "</g>\n");

  absl::StrAppend(&out, "<g class=\"x-ticks\" text-anchor=\"middle\">\n");
  for (double t : xs.ticks) {
    absl::StrAppend(&out, "<text x=\"", Num(xs(t)), "\" y=\"", Num(y1 + 18),
                    "\">", Escape(FormatTick(t, xstep)), "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n");
  absl::StrAppend(&out, "<g class=\"y-ticks\" text-anchor=\"end\">\n");
  for (double t : ls.ticks) {
    absl::StrAppend(&out, "<text x=\"", Num(x0 - 6), "\" y=\"", Num(ls(t) + 4),
                    "\">", Escape(FormatTick(t, lstep)), "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n");
  if (has_right) {
    absl::StrAppend(&out, "<g class=\"y2-ticks\" text-anchor=\"start\">\n");
    for (double t : rs.ticks) {
      absl::StrAppend(&out, "<text x=\"", Num(x1 + 6), "\" y=\"",
                      Num(rs(t) + 4), "\">", Escape(FormatTick(t, rstep)),
                      "</text>\n");
    }
    absl::StrAppend(&out, "</g>\n");
  }

  // Axis labels.
  absl::StrAppend(&out, "<text class=\"x-label\" x=\"", Num((x0 + x1) / 2),
                  "\" y=\"", Num(height - 16), "\" text-anchor=\"middle\">",
                  Escape(options.x_label), "</text>\n");
  absl::StrAppend(&out, "<text class=\"y-label\" transform=\"translate(18,",
                  Num((y0 + y1) / 2), ") rotate(-90)\" text-anchor=\"middle\">",
                  Escape(options.left_label), "</text>\n");
  if (has_right) {
    absl::StrAppend(&out, "<text class=\"y2-label\" transform=\"translate(",
                    Num(width - 14), ",", Num((y0 + y1) / 2),
                    ") rotate(90)\" text-anchor=\"middle\">",
                    Escape(options.right_label), "</text>\n");
  }

  // Data, clipped to the plot area.
  absl::StrAppend(&out, "<defs><clipPath id=\"plot-area\"><rect x=\"", Num(x0),
                  "\" y=\"", Num(y0), "\" width=\"", Num(x1 - x0),
                  "\" height=\"", Num(y1 - y0), "\"/></clipPath></defs>\n");
  struct LegendEntry {
    std::string name, color;
    bool dashed, points;
  };
  std::vector<LegendEntry> legend;
  int color_index = 0;
  for (const Series& s : series) {
    const std::string color =
        s.color.empty() ? kPalette[color_index % kPaletteSize] : s.color;
    ++color_index;
    const Scale& ys = s.axis == Axis::kRight ? rs : ls;
    const bool dashed = s.axis == Axis::kRight && s.style == Style::kLine;
    std::string body;
    int points = 0;
    bool pen_down = false;
    for (size_t i = 0; i < NumPairs(s); ++i) {
      if (!Finite(s, i)) {
        pen_down = false;
        continue;
      }
      const double px = xs(s.x[i]), py = ys(s.y[i]);
      if (s.style == Style::kLine) {
        absl::StrAppend(&body, body.empty() ? "" : " ", pen_down ? "L" : "M",
                        Num(px), ",", Num(py));
        pen_down = true;
      } else {
        absl::StrAppend(&body, "<circle cx=\"", Num(px), "\" cy=\"", Num(py),
                        "\" r=\"3.5\"/>\n");
      }
      ++points;
    }
    if (points == 0) continue;
    legend.push_back({s.name, color, dashed, s.style == Style::kPoints});
    if (s.style == Style::kLine) {
      absl::StrAppend(
          &out, "<path class=\"series\" data-name=\"", Escape(s.name),
          "\" data-points=\"", points,
          "\" clip-path=\"url(#plot-area)\" fill=\"none\" stroke=\"",
          Escape(color), "\" stroke-width=\"1.8\"",
          dashed ? " stroke-dasharray=\"6 4\"" : "", " d=\"", body, "\"/>\n");
    } else {
      absl::StrAppend(&out, "<g class=\"series\" data-name=\"", Escape(s.name),
                      "\" data-points=\"", points,
                      "\" clip-path=\"url(#plot-area)\" fill=\"", Escape(color),
                      "\">\n", body, "</g>\n");
    }
  }

  // Legend, top right inside the plot area.
  if (!legend.empty()) {
    size_t longest = 0;
    for (const auto& e : legend) longest = std::max(longest, e.name.size());
    const double lw = 44 + 7.0 * longest, lh = 8 + 18.0 * legend.size();
    const double lx = x1 - lw - 10, ly = y0 + 10;
    absl::StrAppend(
        &out, "<g class=\"legend\">\n<rect x=\"", Num(lx), "\" y=\"", Num(ly),
        "\" width=\"", Num(lw), "\" height=\"", Num(lh),
        "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999\"/>\n");
    for (size_t i = 0; i < legend.size(); ++i) {
      const auto& e = legend[i];
      const double cy = ly + 13 + 18.0 * i;
      if (e.points) {
        absl::StrAppend(&out, "<circle cx=\"", Num(lx + 18), "\" cy=\"",
                        Num(cy), "\" r=\"3.5\" fill=\"", Escape(e.color),
                        "\"/>\n");
      } else {
        absl::StrAppend(&out, "<line x1=\"", Num(lx + 6), "\" y1=\"", Num(cy),
                        "\" x2=\"", Num(lx + 30), "\" y2=\"", Num(cy),
                        "\" stroke=\"", Escape(e.color),
                        "\" stroke-width=\"1.8\"",
                        e.dashed ? " stroke-dasharray=\"6 4\"" : "", "/>\n");
      }
      absl::StrAppend(&out, "<text x=\"", Num(lx + 36), "\" y=\"", Num(cy + 4),
                      "\">", Escape(e.name), "</text>\n");
    }
    absl::StrAppend(&out, "</g>\n");
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

}  // namespace plot
}  // namespace bertps

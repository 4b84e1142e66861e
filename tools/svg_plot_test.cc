#include "tools/svg_plot.h"

#include <cctype>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace bertps {
namespace plot {
namespace {

// One element of a parsed document.
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside (entities kept)
};

// A small XML well-formedness check: balanced tags, quoted attributes, no
// duplicate attributes, only the predefined entities, exactly one root.
// Returns the elements in document order, or an error in *error.
std::vector<Element> ParseXml(const std::string& doc, std::string* error) {
  std::vector<Element> elements;
  std::vector<std::string> open;
  std::vector<size_t> open_index;
  int roots = 0;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    *error = why + " at offset " + std::to_string(i);
    return std::vector<Element>();
  };
  auto check_entities = [&](const std::string& s) {
    for (size_t p = s.find('&'); p != std::string::npos;
         p = s.find('&', p + 1)) {
      const size_t semi = s.find(';', p);
      if (semi == std::string::npos) return false;
      const std::string ent = s.substr(p, semi - p + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" &&
          ent != "&apos;") {
        return false;
      }
    }
    return true;
  };
  if (doc.compare(0, 5, "<?xml") == 0) {
    i = doc.find("?>");
    if (i == std::string::npos) return fail("unterminated declaration");
    i += 2;
  }
  while (i < doc.size()) {
    if (doc[i] != '<') {
      const size_t next = doc.find('<', i);
      const std::string text = doc.substr(i, next - i);
      if (text.find('>') != std::string::npos) return fail("stray '>'");
      if (!check_entities(text)) return fail("bad entity in text");
      if (open.empty()) {
        if (text.find_first_not_of(" \t\r\n") != std::string::npos) {
          return fail("text outside the root");
        }
      } else {
        elements[open_index.back()].text += text;
      }
      if (next == std::string::npos) break;
      i = next;
      continue;
    }
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return fail("unterminated tag");
    std::string tag = doc.substr(i + 1, end - i - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        return fail("mismatched </" + name + ">");
      }
      open.pop_back();
      open_index.pop_back();
      i = end + 1;
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    Element e;
    size_t p = 0;
    while (p < tag.size() && !isspace(tag[p])) ++p;
    e.name = tag.substr(0, p);
    if (e.name.empty()) return fail("empty tag name");
    while (true) {
      while (p < tag.size() && isspace(tag[p])) ++p;
      if (p >= tag.size()) break;
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size() ||
          tag[eq + 1] != '"') {
        return fail("unquoted attribute in <" + e.name + ">");
      }
      const std::string key = tag.substr(p, eq - p);
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return fail("unterminated attribute");
      const std::string value = tag.substr(eq + 2, close - eq - 2);
      if (value.find('<') != std::string::npos || !check_entities(value)) {
        return fail("bad attribute value");
      }
      if (!e.attrs.emplace(key, value).second) {
        return fail("duplicate attribute " + key);
      }
      p = close + 1;
    }
    if (open.empty()) ++roots;
    elements.push_back(e);
    if (!self_closing) {
      open.push_back(e.name);
      open_index.push_back(elements.size() - 1);
    }
    i = end + 1;
  }
  if (!open.empty()) return fail("unclosed <" + open.back() + ">");
  if (roots != 1) return fail("expected one root element");
  return elements;
}

std::vector<Element> MustParse(const std::string& svg) {
  std::string error;
  std::vector<Element> elements = ParseXml(svg, &error);
  EXPECT_EQ(error, "") << svg;
  return elements;
}

const Element* FindSeries(const std::vector<Element>& elements,
                          const std::string& name) {
  for (const Element& e : elements) {
    auto cls = e.attrs.find("class");
    auto n = e.attrs.find("data-name");
    if (cls != e.attrs.end() && cls->second == "series" && n != e.attrs.end() &&
        n->second == name) {
      return &e;
    }
  }
  return nullptr;
}

// Number of M/L commands in a path's "d" and how many of them are M.
std::pair<int, int> PathCommands(const std::string& d) {
  int total = 0, moves = 0;
  for (absl::string_view cmd : absl::StrSplit(d, ' ', absl::SkipEmpty())) {
    ++total;
    if (cmd[0] == 'M') ++moves;
  }
  return {total, moves};
}

std::vector<Series> LossAndLr(int n) {
  Series loss{"loss", {}, {}, Axis::kLeft, Style::kLine, ""};
  Series lr{"learning rate", {}, {}, Axis::kRight, Style::kLine, ""};
  for (int i = 0; i < n; ++i) {
    loss.x.push_back(i + 1);
    loss.y.push_back(10.0 * std::exp(-i / 30.0) + 1.5);
    lr.x.push_back(i + 1);
    lr.y.push_back(1e-4 * std::min(1.0, (i + 1) / 10.0));
  }
  return {loss, lr};
}

TEST(SvgPlotTest, WellFormedWithAxesTitleLegendAndEveryPoint) {
  PlotOptions o;
  o.title = "job j-1 (tiny) loss";
  const std::string svg = RenderLossSvg(LossAndLr(100), o);
  const std::vector<Element> elements = MustParse(svg);
  ASSERT_FALSE(elements.empty());
  EXPECT_EQ(elements[0].name, "svg");
  EXPECT_EQ(elements[0].attrs.at("xmlns"), "http://www.w3.org/2000/svg");

  const Element* loss = FindSeries(elements, "loss");
  const Element* lr = FindSeries(elements, "learning rate");
  ASSERT_NE(loss, nullptr);
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(loss->name, "path");
  EXPECT_EQ(PathCommands(loss->attrs.at("d")), std::make_pair(100, 1));
  EXPECT_EQ(PathCommands(lr->attrs.at("d")), std::make_pair(100, 1));
  EXPECT_EQ(loss->attrs.at("data-points"), "100");

  std::map<std::string, int> texts_in_class;
  bool has_title = false, has_legend = false;
  int tick_labels = 0;
  for (const Element& e : elements) {
    auto cls = e.attrs.find("class");
    if (cls == e.attrs.end()) continue;
    if (cls->second == "title" && e.text == o.title) has_title = true;
    if (cls->second == "legend") has_legend = true;
    if (cls->second == "x-ticks" || cls->second == "y-ticks" ||
        cls->second == "y2-ticks") {
      ++texts_in_class[cls->second];
    }
  }
  EXPECT_TRUE(has_title);
  EXPECT_TRUE(has_legend);
  EXPECT_EQ(texts_in_class.size(), 3u);  // both y axes and the x axis
  for (const Element& e : elements) {
    if (e.name == "text" && !e.text.empty()) ++tick_labels;
  }
  EXPECT_GT(tick_labels, 10);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">learning rate</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);

  // Every coordinate lies inside the canvas.
  for (absl::string_view cmd :
       absl::StrSplit(loss->attrs.at("d"), ' ', absl::SkipEmpty())) {
    std::vector<std::string> xy = absl::StrSplit(cmd.substr(1), ',');
    ASSERT_EQ(xy.size(), 2u);
    const double x = std::stod(xy[0]), y = std::stod(xy[1]);
    EXPECT_GE(x, 0);
    EXPECT_LE(x, o.width);
    EXPECT_GE(y, 0);
    EXPECT_LE(y, o.height);
  }
}

TEST(SvgPlotTest, NoRightAxisWithoutRightSeries) {
  std::vector<Series> s = LossAndLr(10);
  s.pop_back();
  const std::string svg = RenderLossSvg(s, PlotOptions());
  MustParse(svg);
  EXPECT_EQ(svg.find("y2-ticks"), std::string::npos);
}

TEST(SvgPlotTest, NonFinitePointsAreSkippedAndBreakTheLine) {
  std::vector<Series> s = LossAndLr(10);
  s[0].y[5] = std::nan("");
  s[0].y[7] = INFINITY;
  const std::vector<Element> elements =
      MustParse(RenderLossSvg(s, PlotOptions()));
  const Element* loss = FindSeries(elements, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(PathCommands(loss->attrs.at("d")), std::make_pair(8, 3));
}

TEST(SvgPlotTest, PointSeriesHasOneCirclePerPoint) {
  std::vector<Series> s = LossAndLr(20);
  Series eval{"eval loss", {5, 10, 15, 20}, {4.0, 3.5, 3.2, 3.0},
              Axis::kLeft, Style::kPoints,  "#2ca02c"};
  s.push_back(eval);
  const std::string svg = RenderLossSvg(s, PlotOptions());
  const std::vector<Element> elements = MustParse(svg);
  int circles_in_series = 0;
  bool inside = false;
  for (const Element& e : elements) {
    if (e.name == "g") {
      auto n = e.attrs.find("data-name");
      inside = n != e.attrs.end() && n->second == "eval loss";
    } else if (inside && e.name == "circle") {
      ++circles_in_series;
    } else if (e.name != "circle") {
      inside = false;
    }
  }
  EXPECT_EQ(circles_in_series, 4);
  EXPECT_NE(svg.find(">eval loss</text>"), std::string::npos);
}

TEST(SvgPlotTest, EmptyDataStillMakesADocument) {
  const std::string svg = RenderLossSvg({}, PlotOptions());
  MustParse(svg);
  EXPECT_NE(svg.find("no data"), std::string::npos);
  Series nan_only{"loss", {1, 2}, {NAN, NAN}, Axis::kLeft, Style::kLine, ""};
  const std::string svg2 = RenderLossSvg({nan_only}, PlotOptions());
  MustParse(svg2);
  EXPECT_NE(svg2.find("no data"), std::string::npos);
}

TEST(SvgPlotTest, SinglePointAndTextAreEscaped) {
  PlotOptions o;
  o.title = "a < b & \"c\"";
  Series one{"loss <1>", {3}, {2.5}, Axis::kLeft, Style::kLine, ""};
  const std::string svg = RenderLossSvg({one}, o);
  const std::vector<Element> elements = MustParse(svg);
  EXPECT_NE(svg.find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
  const Element* loss = FindSeries(elements, "loss &lt;1&gt;");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(PathCommands(loss->attrs.at("d")), std::make_pair(1, 1));
}

TEST(SvgPlotTest, NiceTicks) {
  EXPECT_EQ(NiceTicks(0, 100, 8),
            (std::vector<double>{0, 20, 40, 60, 80, 100}));
  std::vector<double> t = NiceTicks(1.37, 9.8, 6);
  EXPECT_LE(t.front(), 1.37);
  EXPECT_GE(t.back(), 9.8);
  EXPECT_NEAR(t[1] - t[0], 2.0, 1e-12);
  t = NiceTicks(5, 5, 6);  // degenerate range is widened
  EXPECT_LT(t.front(), 5);
  EXPECT_GT(t.back(), 5);
  t = NiceTicks(0, 1e-4, 5);
  EXPECT_EQ(t.front(), 0);
  EXPECT_NEAR(t.back(), 1e-4, 1e-15);
  EXPECT_EQ(t.size(), 6u);
  t = NiceTicks(NAN, 3, 5);
  EXPECT_GE(t.size(), 2u);
}

TEST(SvgPlotTest, FormatTick) {
  EXPECT_EQ(FormatTick(0, 0.5), "0");
  EXPECT_EQ(FormatTick(2.5, 0.5), "2.5");
  EXPECT_EQ(FormatTick(40, 20), "40");
  EXPECT_EQ(FormatTick(0.15, 0.05), "0.15");
  EXPECT_EQ(FormatTick(4e-5, 2e-5), "0.00004");
  EXPECT_EQ(FormatTick(1e-4, 2e-5), "0.00010");
  EXPECT_EQ(FormatTick(3e-8, 1e-8), "3e-08");
  EXPECT_EQ(FormatTick(2e6, 1e6), "2e+06");
}

}  // namespace
}  // namespace plot
}  // namespace bertps

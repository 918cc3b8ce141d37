// Line charts of a run's metrics, drawn with Cairo into a PNG or SVG file.
//
// A Figure is a title over panels stacked vertically that share the x axis
// (the step); each panel has its own y axis (linear or log), grid, and
// series. The caller chooses each series' label, colour and style; the
// figure lays out the axes, "nice" tick values (1, 2, 2.5, 5 × 10^k), the
// tick labels (with a shared ×10^k factor when the values are very small or
// large, as matplotlib does) and a legend in the panel corner that hides the
// fewest points. Points must be finite (and positive on a log axis): the
// caller drops the others and says so.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace trident::plot {

// An RGB colour, each component in [0, 1].
using Color = std::array<double, 3>;
// The i-th colour of the palette matplotlib users know ("tab10"), cycling.
Color palette(int i);

struct Series {
  std::string label;  // in the legend; empty: not listed
  std::vector<double> x, y;
  Color color = palette(0);
  bool dashed = false;
  bool markers = false;  // a dot on each point (sparse series such as validation)
};

struct Panel {
  std::string y_title;
  bool log_y = false;
  std::vector<Series> series;
  bool legend = true;        // draw the legend of the labelled series
  double height_weight = 1;  // the panels share the height in these proportions
};

struct Figure {
  std::string title;
  std::string x_title = "step";
  bool x_integer = true;  // x ticks at whole numbers only
  std::vector<Panel> panels;
  int width = 1000, height = 760;  // pixels (PNG) or points (SVG)
};

// Writes the figure to `path`; the extension chooses the format (.png or .svg, any case). The file
// appears whole or not at all. Errors name the path.
void write_figure(const Figure& figure, const std::string& path);

// The format `path`'s extension names: "png" or "svg"; an error naming the path and the choices
// otherwise (checked before any work).
std::string figure_format(const std::string& path);

// An axis' range and ticks. `lo`/`hi` are the drawn range (the data's, padded); `ticks` lie in it;
// each label is ticks[i] / 10^exponent printed with `decimals` decimals (log axes: as %g, exponent 0).
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  int exponent = 0;  // the ×10^exponent factor shown once by the axis; 0: none
  int decimals = 0;
  std::vector<std::string> labels;
};

// The "nice" step between about `target` ticks over [lo, hi]: 1, 2, 2.5 or 5 × 10^k.
double nice_step(double lo, double hi, int target);
// A linear axis over the data range [lo, hi] (lo <= hi, finite), padded by `margin` of the range on
// each side (a zero range is widened), with about `target` ticks; `integer`: ticks at whole numbers
// only (steps).
Axis linear_axis(double lo, double hi, int target, double margin = 0.05, bool integer = false);
// A log axis over the positive data range [lo, hi]: ticks at the powers of ten in range, or at 1, 2, 5 ×
// 10^k (then every integer × 10^k) when fewer than `min_ticks` powers fall in it.
Axis log_axis(double lo, double hi, int min_ticks = 3, double margin = 0.05);

}  // namespace trident::plot

// Drawing a Figure with Cairo (figure.h). The file is rendered into memory and then written whole.
#include "trident/plot/figure.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <numbers>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"

namespace trident::plot {

namespace {

constexpr const char* kFont = "DejaVu Sans";
constexpr double kPi = std::numbers::pi;
constexpr Color kText = {0.15, 0.15, 0.15};
constexpr Color kSpine = {0.25, 0.25, 0.25};
constexpr Color kGrid = {0.88, 0.88, 0.88};
constexpr double kTick = 4, kTickFont = 11.5, kAxisFont = 13, kTitleFont = 16, kLegendFont = 11.5;

void set_color(cairo_t* cr, const Color& c, double alpha = 1) {
  cairo_set_source_rgba(cr, c[0], c[1], c[2], alpha);
}

void set_font(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& s) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

// Text anchored at (x, y): `ax` 0/0.5/1 = left/centre/right of the text at x; `ay` likewise for the
// top/middle/bottom of the font's cap height at y.
void draw_text(cairo_t* cr, const std::string& s, double x, double y, double ax, double ay) {
  cairo_font_extents_t fe;
  cairo_font_extents(cr, &fe);
  const double cap = fe.ascent * 0.72;  // DejaVu's cap height relative to its ascent
  cairo_move_to(cr, x - ax * text_width(cr, s), y + cap * (1 - ay));
  cairo_show_text(cr, s.c_str());
}

// "×10⁻³": the factor an axis' tick labels share.
std::string factor_text(int exponent) {
  static const char* const digits[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string s = "×10";
  if (exponent < 0) s += "⁻";
  const std::string n = std::to_string(std::abs(exponent));
  for (const char d : n) s += digits[d - '0'];
  return s;
}

// Where a panel's plotting area is on the page, and the mapping of data to it.
struct Frame {
  double left, top, right, bottom;
  Axis x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const {
    const double f =
        y.log ? (std::log10(v) - std::log10(y.lo)) / (std::log10(y.hi) - std::log10(y.lo)) : (v - y.lo) / (y.hi - y.lo);
    return bottom - f * (bottom - top);
  }
};

// About one tick per 55 pixels of height.
Axis y_axis_of(const Panel& panel, double height) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Series& s : panel.series) {
    for (const double v : s.y) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (lo > hi) lo = hi = panel.log_y ? 1 : 0;  // a panel without points still gets axes
  return panel.log_y ? log_axis(lo, hi) : linear_axis(lo, hi, std::clamp(static_cast<int>(height / 55), 3, 9));
}

// The line style of `s` (colour, width, dashes) for the path about to be stroked.
void set_line_style(cairo_t* cr, const Series& s) {
  set_color(cr, s.color);
  cairo_set_line_width(cr, 1.8);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  const double dash[] = {7, 4};
  cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
}

// A dot in the series' colour with a white rim, so that dots on a line stay visible.
void draw_marker(cairo_t* cr, const Color& color, double x, double y) {
  cairo_set_dash(cr, nullptr, 0, 0);
  cairo_new_sub_path(cr);
  cairo_arc(cr, x, y, 3.5, 0, 2 * kPi);
  set_color(cr, color);
  cairo_fill_preserve(cr);
  set_color(cr, {1, 1, 1});
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
}

void draw_series(cairo_t* cr, const Frame& f, const Series& s) {
  if (s.x.empty()) return;
  if (s.x.size() > 1) {
    set_line_style(cr, s);
    cairo_move_to(cr, f.px(s.x[0]), f.py(s.y[0]));
    for (std::size_t i = 1; i < s.x.size(); ++i) cairo_line_to(cr, f.px(s.x[i]), f.py(s.y[i]));
    cairo_stroke(cr);
  }
  if (!s.markers && s.x.size() > 1) return;  // a lone point is always shown as a dot
  for (std::size_t i = 0; i < s.x.size(); ++i) draw_marker(cr, s.color, f.px(s.x[i]), f.py(s.y[i]));
}

// The legend's box in the corner of the frame that covers the fewest points of the series (sampled
// along their lines), preferring upper right, upper left, lower left, lower right, as matplotlib's "best".
void draw_legend(cairo_t* cr, const Frame& f, const Panel& panel) {
  std::vector<const Series*> listed;
  for (const Series& s : panel.series) {
    if (!s.label.empty()) listed.push_back(&s);
  }
  if (!panel.legend || listed.empty()) return;
  set_font(cr, kLegendFont);
  double label_w = 0;
  for (const Series* s : listed) label_w = std::max(label_w, text_width(cr, s->label));
  const double pad = 8, sample = 26, row = 19, w = pad + sample + 8 + label_w + pad;
  const double h = pad + row * static_cast<double>(listed.size()) - (row - 12) + pad, inset = 10;
  const double xs[] = {f.right - inset - w, f.left + inset, f.left + inset, f.right - inset - w};
  const double ys[] = {f.top + inset, f.top + inset, f.bottom - inset - h, f.bottom - inset - h};
  int best = 0;
  long best_hidden = std::numeric_limits<long>::max();
  for (int c = 0; c < 4; ++c) {
    long hidden = 0;
    for (const Series& s : panel.series) {
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        const std::size_t j = i + 1 < s.x.size() ? i + 1 : i;
        for (int k = 0; k < 8; ++k) {
          const double t = k / 8.0;
          const double x = f.px(s.x[i]) * (1 - t) + f.px(s.x[j]) * t, y = f.py(s.y[i]) * (1 - t) + f.py(s.y[j]) * t;
          hidden += x >= xs[c] && x <= xs[c] + w && y >= ys[c] && y <= ys[c] + h;
        }
      }
    }
    if (hidden < best_hidden) {
      best = c;
      best_hidden = hidden;
    }
  }
  const double x0 = xs[best], y0 = ys[best], r = 4;
  cairo_new_sub_path(cr);
  cairo_arc(cr, x0 + w - r, y0 + r, r, -kPi / 2, 0);
  cairo_arc(cr, x0 + w - r, y0 + h - r, r, 0, kPi / 2);
  cairo_arc(cr, x0 + r, y0 + h - r, r, kPi / 2, kPi);
  cairo_arc(cr, x0 + r, y0 + r, r, kPi, 3 * kPi / 2);
  cairo_close_path(cr);
  set_color(cr, {1, 1, 1}, 0.88);
  cairo_fill_preserve(cr);
  set_color(cr, {0.8, 0.8, 0.8});
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const double cy = y0 + pad + 6 + row * static_cast<double>(i);
    const double sx = x0 + pad;
    set_line_style(cr, *listed[i]);
    cairo_move_to(cr, sx, cy);
    cairo_line_to(cr, sx + sample, cy);
    cairo_stroke(cr);
    if (listed[i]->markers || listed[i]->x.size() == 1) draw_marker(cr, listed[i]->color, sx + sample / 2, cy);
    set_color(cr, kText);
    set_font(cr, kLegendFont);
    draw_text(cr, listed[i]->label, x0 + pad + sample + 8, cy, 0, 0.5);
  }
}

double snap(double v) {
  return std::floor(v) + 0.5;
}  // crisp 1-pixel lines

void draw_panel(cairo_t* cr, const Frame& f, const Panel& panel, bool x_labels, const std::string& x_title) {
  // Grid, then the clipped series, then the frame and ticks over them.
  set_color(cr, kGrid);
  cairo_set_line_width(cr, 1);
  for (const double t : f.x.ticks) {
    cairo_move_to(cr, snap(f.px(t)), f.top);
    cairo_line_to(cr, snap(f.px(t)), f.bottom);
  }
  for (const double t : f.y.ticks) {
    cairo_move_to(cr, f.left, snap(f.py(t)));
    cairo_line_to(cr, f.right, snap(f.py(t)));
  }
  cairo_stroke(cr);
  cairo_save(cr);
  cairo_rectangle(cr, f.left, f.top, f.right - f.left, f.bottom - f.top);
  cairo_clip(cr);
  for (const Series& s : panel.series) draw_series(cr, f, s);
  cairo_restore(cr);

  set_color(cr, kSpine);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, snap(f.left), snap(f.top), std::round(f.right - f.left), std::round(f.bottom - f.top));
  for (const double t : f.x.ticks) {
    cairo_move_to(cr, snap(f.px(t)), snap(f.bottom));
    cairo_line_to(cr, snap(f.px(t)), snap(f.bottom) + kTick);
  }
  for (const double t : f.y.ticks) {
    cairo_move_to(cr, snap(f.left), snap(f.py(t)));
    cairo_line_to(cr, snap(f.left) - kTick, snap(f.py(t)));
  }
  cairo_stroke(cr);

  set_color(cr, kText);
  set_font(cr, kTickFont);
  for (std::size_t i = 0; i < f.y.ticks.size(); ++i)
    draw_text(cr, f.y.labels[i], f.left - kTick - 4, f.py(f.y.ticks[i]), 1, 0.5);
  if (f.y.exponent != 0) draw_text(cr, factor_text(f.y.exponent), f.left, f.top - 6, 0, 1);
  if (x_labels) {
    for (std::size_t i = 0; i < f.x.ticks.size(); ++i)
      draw_text(cr, f.x.labels[i], f.px(f.x.ticks[i]), f.bottom + kTick + 5, 0.5, 0);
    if (f.x.exponent != 0) draw_text(cr, factor_text(f.x.exponent), f.right, f.bottom + kTick + 22, 1, 0);
    set_font(cr, kAxisFont);
    draw_text(cr, x_title, (f.left + f.right) / 2, f.bottom + kTick + 28, 0.5, 0);
  }
  set_font(cr, kAxisFont);
  cairo_save(cr);
  cairo_translate(cr, 20, (f.top + f.bottom) / 2);
  cairo_rotate(cr, -kPi / 2);
  draw_text(cr, panel.y_title, 0, 0, 0.5, 0.5);
  cairo_restore(cr);
  draw_legend(cr, f, panel);
}

void draw_figure(cairo_t* cr, const Figure& fig) {
  set_color(cr, {1, 1, 1});
  cairo_paint(cr);
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  for (const Panel& p : fig.panels) {
    for (const Series& s : p.series) {
      for (const double v : s.x) {
        x_lo = std::min(x_lo, v);
        x_hi = std::max(x_hi, v);
      }
    }
  }
  if (x_lo > x_hi) x_lo = x_hi = 0;
  const Axis x = linear_axis(x_lo, x_hi, 8, 0.02, fig.x_integer);
  const double top = 52, bottom = fig.height - 58.0, gap = 30;
  double weights = 0;
  for (const Panel& p : fig.panels) weights += p.height_weight;
  const double usable = bottom - top - gap * static_cast<double>(fig.panels.size() - 1);
  std::vector<double> heights;
  std::vector<Axis> ys;
  double widest = 0;
  set_font(cr, kTickFont);
  for (const Panel& p : fig.panels) {
    heights.push_back(std::round(usable * p.height_weight / weights));
    ys.push_back(y_axis_of(p, heights.back()));
    for (const std::string& l : ys.back().labels) widest = std::max(widest, text_width(cr, l));
  }
  const double left = std::round(34 + widest + kTick + 6), right = fig.width - 28.0;
  double y = top;
  for (std::size_t i = 0; i < fig.panels.size(); ++i) {
    draw_panel(cr, Frame{left, y, right, y + heights[i], x, ys[i]}, fig.panels[i], i + 1 == fig.panels.size(),
               fig.x_title);
    y += heights[i] + gap;
  }
  set_color(cr, kText);
  set_font(cr, kTitleFont, true);
  draw_text(cr, fig.title, (left + right) / 2, 22, 0.5, 0.5);
}

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};

void check(cairo_status_t status, const std::string& path, const char* what) {
  TRIDENT_CHECK(status == CAIRO_STATUS_SUCCESS, "plot '{}': {} failed: {}", path, what, cairo_status_to_string(status));
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer's built-in suppressions for every binary that draws: the font patterns fontconfig
// allocates for Cairo's toy font faces are never freed by those libraries (lost at exit, once).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libfontconfig.so\n";
}
#endif

Color palette(int i) {
  static const Color colors[] = {{0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173},
                                 {0.839, 0.153, 0.157}, {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294},
                                 {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498}, {0.737, 0.741, 0.133},
                                 {0.090, 0.745, 0.812}};
  return colors[((i % 10) + 10) % 10];
}

std::string figure_format(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  TRIDENT_CHECK(ext == ".png" || ext == ".svg", "'{}': the plot's format follows the extension, .png or .svg, got {}",
                path, ext.empty() ? "none" : "'" + ext + "'");
  return ext.substr(1);
}

void write_figure(const Figure& figure, const std::string& path) {
  const std::string format = figure_format(path);
  TRIDENT_CHECK(!figure.panels.empty(), "plot '{}': a figure needs at least one panel", path);
  std::string bytes;
  std::unique_ptr<cairo_surface_t, SurfaceDeleter> surface(
      format == "png" ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, figure.width, figure.height)
                      : cairo_svg_surface_create_for_stream(append_to_string, &bytes, figure.width, figure.height));
  check(cairo_surface_status(surface.get()), path, "creating the surface");
  if (format == "svg") cairo_svg_surface_set_document_unit(surface.get(), CAIRO_SVG_UNIT_PX);
  {
    std::unique_ptr<cairo_t, ContextDeleter> cr(cairo_create(surface.get()));
    draw_figure(cr.get(), figure);
    check(cairo_status(cr.get()), path, "drawing");
  }
  if (format == "png") {
    check(cairo_surface_write_to_png_stream(surface.get(), append_to_string, &bytes), path, "encoding the PNG");
  } else {
    cairo_surface_finish(surface.get());
    check(cairo_surface_status(surface.get()), path, "writing the SVG");
  }
  write_file_atomically(path, bytes);
}

}  // namespace trident::plot

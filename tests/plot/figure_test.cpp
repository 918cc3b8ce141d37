// Writing a Figure (plot/figure.h): the format follows the extension, and the files are whole PNG and SVG
// (tests/cli/plot_test.sh checks the command's pictures in more detail).
#include "trident/plot/figure.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/helpers.h"
#include "trident/core/error.h"

namespace trident::plot {
namespace {

namespace fs = std::filesystem;

class FigureTest : public ::testing::Test {
 protected:
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static Figure two_panels() {
    Figure f;
    f.title = "run: loss and learning rate";
    f.width = 640;
    f.height = 480;
    f.panels.push_back(Panel{"loss",
                             false,
                             {Series{"training loss", {10, 20, 30}, {5, 4, 3.5}, palette(0)},
                              Series{"validation loss", {0, 30}, {6, 3.7}, palette(1), false, true}}});
    f.panels.push_back(
        Panel{"learning rate", false, {Series{"", {10, 20, 30}, {1e-3, 2e-3, 1.5e-3}, palette(0)}}, false});
    return f;
  }
  const testing::TempDir dir_{"trident-figure"};
};

std::uint32_t big_endian(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

TEST_F(FigureTest, WritesAPngOfTheFiguresSize) {
  const fs::path png = dir_ / "loss.PNG";  // the extension in any case
  write_figure(two_panels(), png.string());
  const std::string bytes = read(png);
  ASSERT_GT(bytes.size(), 33u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian(bytes, 16), 640u);
  EXPECT_EQ(big_endian(bytes, 20), 480u);
}

TEST_F(FigureTest, WritesAnSvgWithTheSeriesColours) {
  const fs::path svg = dir_ / "loss.svg";
  write_figure(two_panels(), svg.string());
  const std::string text = read(svg);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("width=\"640px\""), std::string::npos);
  // Cairo writes colours as percentages: tab10's blue (31,119,180) and orange (255,127,14).
  EXPECT_NE(text.find("stroke:rgb(12.2"), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("rgb(100%,49.8"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
}

TEST_F(FigureTest, TheExtensionChoosesTheFormat) {
  EXPECT_EQ(figure_format("a/b.png"), "png");
  EXPECT_EQ(figure_format("B.SVG"), "svg");
  EXPECT_EQ(testing::error_message([] { figure_format("loss.jpg"); }),
            "'loss.jpg': the plot's format follows the extension, .png or .svg, got '.jpg'");
  EXPECT_EQ(testing::error_message([] { figure_format("loss"); }),
            "'loss': the plot's format follows the extension, .png or .svg, got none");
  const fs::path jpg = dir_ / "loss.jpg";
  EXPECT_NE(testing::error_message([&] { write_figure(two_panels(), jpg.string()); }), "");
  EXPECT_FALSE(fs::exists(jpg));
}

TEST_F(FigureTest, PanelsWithoutPointsOrWithOnePointStillDraw) {
  Figure f = two_panels();
  f.panels[0].series = {Series{"one", {7}, {2.5}}};
  f.panels[1].series.clear();
  const fs::path png = dir_ / "one.png";
  write_figure(f, png.string());
  EXPECT_TRUE(fs::exists(png));
  f.panels[0].log_y = true;
  write_figure(f, png.string());
  EXPECT_EQ(read(png).substr(1, 3), "PNG");
}

}  // namespace
}  // namespace trident::plot

// Reading metrics.jsonl back (train/log/metrics_log.h): what MetricsLogger writes, repeated steps, values
// that are not finite, and bad files named with the line at fault.
#include "trident/train/log/metrics_log.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "testing/helpers.h"
#include "trident/train/log/metrics.h"

namespace trident::train {
namespace {

class MetricsLogTest : public ::testing::Test {
 protected:
  void write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }
  std::string error() {
    return testing::error_message([&] { read_metrics_log(path_); });
  }
  const testing::TempDir dir_{"trident-metrics-log"};
  const std::string path_ = dir_ / "metrics.jsonl";
};

using Steps = std::vector<std::int64_t>;
using Values = std::vector<double>;

TEST_F(MetricsLogTest, ReadsWhatTheLoggerWrites) {
  {
    MetricsLogger logger(path_, "off", true);
    logger.log_eval(0, 8.5);
    for (int step = 10; step <= 30; step += 10) {
      StepMetrics m;
      m.step = step;
      m.steps = 30;
      m.loss = 10.0 - step / 10.0;
      m.lr = 1e-3 * step / 30;
      logger.log_step(m, true);
    }
    logger.log_eval(30, 6.75);
    logger.finish();
  }
  const MetricsLog log = read_metrics_log(path_);
  EXPECT_EQ(log.path, path_);
  EXPECT_EQ(log.loss.steps, (Steps{10, 20, 30}));
  EXPECT_EQ(log.loss.values, (Values{9, 8, 7}));
  EXPECT_EQ(log.lr.steps, (Steps{10, 20, 30}));
  EXPECT_DOUBLE_EQ(log.lr.values[2], 1e-3);
  EXPECT_EQ(log.val_loss.steps, (Steps{0, 30}));
  EXPECT_EQ(log.val_loss.values, (Values{8.5, 6.75}));
  EXPECT_TRUE(log.dropped.empty());
  EXPECT_FALSE(log.unfinished_last_line);
}

TEST_F(MetricsLogTest, ARepeatedStepKeepsTheLastValueWritten) {
  // Steps 20 and 30 logged, then a resume from step 10 logged them again (and step 20's eval).
  write(R"({"step":10,"loss":5,"lr":1}
{"step":20,"loss":4,"lr":2}
{"step":20,"val_loss":4.5}
{"step":30,"loss":3,"lr":3}
{"step":20,"loss":4.25,"lr":2}
{"step":20,"val_loss":4.4}
{"step":30,"loss":3.5,"lr":3}
{"step":40,"loss":3.25,"lr":4}
)");
  const MetricsLog log = read_metrics_log(path_);
  EXPECT_EQ(log.loss.steps, (Steps{10, 20, 30, 40}));
  EXPECT_EQ(log.loss.values, (Values{5, 4.25, 3.5, 3.25}));
  EXPECT_EQ(log.val_loss.steps, (Steps{20}));
  EXPECT_EQ(log.val_loss.values, (Values{4.4}));
}

TEST_F(MetricsLogTest, ValuesThatAreNotFiniteAreLeftOutAndNamed) {
  {  // NaN and inf as the logger writes them (JSON null) ...
    MetricsLogger logger(path_, "off", true);
    StepMetrics m;
    for (const double loss : {3.0, double(NAN), double(INFINITY), 2.0}) {
      m.step += 10;
      m.loss = loss;
      m.lr = 1e-3;
      logger.log_step(m, true);
    }
    logger.finish();
  }
  std::ofstream(path_, std::ios::app) << R"({"step":50,"loss":NaN,"lr":Infinity,"note":"NaN stays a string"})"
                                      << "\n"
                                      << R"({"step":60,"val_loss":-Infinity})"
                                      << "\n";  // ... and bare (Python's json)
  const MetricsLog log = read_metrics_log(path_);
  EXPECT_EQ(log.loss.steps, (Steps{10, 40}));
  EXPECT_EQ(log.loss.values, (Values{3, 2}));
  EXPECT_EQ(log.lr.steps, (Steps{10, 20, 30, 40}));
  EXPECT_TRUE(log.val_loss.empty());
  EXPECT_EQ(log.dropped, (std::vector<std::string>{"loss at step 20", "loss at step 30", "loss at step 50",
                                                   "lr at step 50", "val_loss at step 60"}));
}

TEST_F(MetricsLogTest, AFiniteValueWrittenLaterReplacesANonFiniteOne) {
  write("{\"step\":10,\"loss\":null}\n{\"step\":10,\"loss\":2.5}\n");
  const MetricsLog log = read_metrics_log(path_);
  EXPECT_EQ(log.loss.values, (Values{2.5}));
  EXPECT_TRUE(log.dropped.empty());
}

TEST_F(MetricsLogTest, OnePointAndNoValidation) {
  write("{\"step\":7,\"loss\":2.5,\"lr\":0.001}\n\n");  // a blank line is skipped
  const MetricsLog log = read_metrics_log(path_);
  EXPECT_EQ(log.loss.steps, (Steps{7}));
  EXPECT_TRUE(log.val_loss.empty());
}

TEST_F(MetricsLogTest, AnUnfinishedLastLineIsSkipped) {
  write("{\"step\":10,\"loss\":5}\n{\"step\":20,\"lo");  // a run writing its next line right now
  const MetricsLog log = read_metrics_log(path_);
  EXPECT_EQ(log.loss.steps, (Steps{10}));
  EXPECT_TRUE(log.unfinished_last_line);
}

TEST_F(MetricsLogTest, BadFilesAreErrorsNamingTheFileAndLine) {
  EXPECT_EQ(
      testing::error_message([&] { read_metrics_log(dir_ / "none.jsonl"); }),
      fmt::format("'{}/none.jsonl': no such file (trident train writes its log.metrics_file, metrics.jsonl by default, into the run directory)", dir_.path().string()));
  EXPECT_EQ(testing::error_message([&] { read_metrics_log(dir_.path().string()); }),
            fmt::format("'{}': is a directory, not a metrics file", dir_.path().string()));
  write("");
  EXPECT_EQ(error(), fmt::format("'{}': no \"loss\" or \"val_loss\" value (the file is empty)", path_));
  write("{\"step\":1,\"tokens_per_s\":5}\n");
  EXPECT_EQ(error(), fmt::format("'{}': no \"loss\" or \"val_loss\" value (no logged step yet)", path_));
  const std::pair<std::string, std::string> cases[] = {
      {"{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":\n{\"step\":3,\"loss\":1}\n",
       "'{}' line 2: not valid JSON: {{\"step\":2,\"loss\":"},
      {"{\"step\":1,\"loss\":2}\n[1,2]\n", "'{}' line 2: expected a JSON object, got [1,2]"},
      {"\n{\"loss\":2}\n", "'{}' line 2: no \"step\" key"},
      {"{\"step\":-1,\"loss\":2}\n", "'{}' line 1: \"step\" must be an integer >= 0, got -1"},
      {"{\"step\":1.5,\"loss\":2}\n", "'{}' line 1: \"step\" must be an integer >= 0, got 1.5"},
      {"{\"step\":1,\"loss\":\"low\"}\n", "'{}' line 1: \"loss\" must be a number, got \"low\""},
      {"{\"step\":1,\"loss\":1,\"lr\":[1]}\n", "'{}' line 1: \"lr\" must be a number, got [1]"},
  };
  for (const auto& [text, expected] : cases) {
    write(text);
    EXPECT_EQ(error(), fmt::format(fmt::runtime(expected), path_)) << text;
  }
}

}  // namespace
}  // namespace trident::train

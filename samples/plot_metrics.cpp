// plot_metrics: renders a training run's metrics log (JSONL, e.g. train_gpt --metrics-log) to an SVG
// (or PNG) figure: loss and validation loss, accuracy, memory, throughput, learning rate, GPU utilisation.
//   plot_metrics run.jsonl -o run.svg [-o run.png] [--title "train_gpt 3-digit addition"]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/cli.h"
#include "kernels/error.h"
#include "metrics/metrics_plot.h"
#include "metrics/raster.h"
#include "metrics/svg.h"

namespace {

int usage(const char* message) {
  if (message) std::fprintf(stderr, "plot_metrics: error: %s\n", message);
  std::fprintf(message ? stderr : stdout,
               "usage: plot_metrics LOG.jsonl -o OUT.svg|OUT.png [-o ...] [--title TEXT]\n"
               "Renders the loss, accuracy, memory and throughput curves of a metrics log to SVG or PNG.\n");
  return message ? 2 : 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int run(int argc, char** argv) {
  std::string input, title;
  std::vector<std::string> outputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return usage(nullptr);
    if ((arg == "-o" || arg == "--output" || arg == "--title") && i + 1 >= argc)
      return usage(("flag " + arg + " expects a value").c_str());
    if (arg == "-o" || arg == "--output")
      outputs.push_back(argv[++i]);
    else if (arg == "--title")
      title = argv[++i];
    else if (!arg.empty() && arg[0] == '-')
      return usage(("unknown flag " + arg).c_str());
    else if (input.empty())
      input = arg;
    else
      return usage("more than one input log given");
  }
  if (input.empty()) return usage("no metrics log given");
  if (outputs.empty()) return usage("no output given (-o OUT.svg or -o OUT.png)");
  for (const std::string& output : outputs)
    if (!ends_with(output, ".svg") && !ends_with(output, ".png"))
      return usage(("output \"" + output + "\" must end in .svg or .png").c_str());
  // The log is the user's input: anything wrong with it is a usage error (exit 2) naming it.
  const auto records = hg::app::or_usage_error("plot_metrics", "input " + input, [&] {
    auto read = hg::metrics::read_metrics(input);
    HG_CHECK(!read.empty(), "[plot_metrics] the log \"", input, "\" has no records");
    return read;
  });
  {
    const hg::metrics::Figure figure = hg::metrics::figure_from_metrics(records, title.empty() ? input : title);
    for (const std::string& output : outputs) {
      if (ends_with(output, ".svg")) {
        hg::metrics::SvgCanvas svg(figure.width(), figure.height());
        hg::metrics::draw(figure, svg);
        svg.save(output);
      } else {
        hg::metrics::RasterCanvas image(figure.width(), figure.height());
        hg::metrics::draw(figure, image);
        image.save_png(output);
      }
      std::printf("plot_metrics: %zu records, %zu charts -> %s\n", records.size(), figure.charts().size(),
                  output.c_str());
    }
  }
  return 0;
}

}  // namespace

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (app/cli.h).
int main(int argc, char** argv) { return hg::app::guarded_main("plot_metrics", [&] { return run(argc, argv); }); }

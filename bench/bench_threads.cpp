// bench_threads: train_gpt's step time over a matrix of thread settings, one JSON object per line.
//
// Each setting runs the real train_gpt (its Trainer, its DataLoader, the sample's default GPT on the
// addition task) in a child process of its own, because the OpenMP settings are environment read
// once when libgomp loads: workers {0, 1, 2} x OpenMP threads {1, 2, the usable cores} x wait policy
// {libgomp's default spin (HALFGRAD_NO_REEXEC=1, GOMP_SPINCOUNT unset), passive (OMP_WAIT_POLICY),
// bounded (GOMP_SPINCOUNT=N for each N of --spin; the samples set 3000)}, plus "default": train_gpt with no thread
// flag and a clean environment, what a user gets (samples/thread_defaults.h). The step times come
// from the run's --metrics-log (step_ms), the first --skip steps dropped; the settings run in
// --rounds interleaved rounds and each setting's steps are pooled, so drift hits all of them alike.
// One line per setting: median and p90 ms/step, the share of time the step waited for data; then a
// summary line: the best setting by median, the default's median over it (target: within 5%).
// --busy N repeats the matrix with N competing processes, each spinning one thread (the samples
// must no longer collapse when something else shares the cores).
// Usage: bench_threads [--train-gpt PATH] [--steps 80] [--skip 10] [--rounds 2] [--busy 1] [--spin 1000,3000,...]
//                      [--quick]
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "json_line.h"
#include "samples/cli.h"
#include "samples/thread_defaults.h"

extern char** environ;

using namespace hg;

namespace {

struct Setting {
  std::string name;  // "w0 t2 bounded" or "default"
  int workers = -1;  // -1: not given (the default row)
  int threads = 0;   // 0: not given
  std::string wait;  // "libgomp", "passive", "bounded" or "default"
  int64_t spin = 0;  // GOMP_SPINCOUNT for "bounded"
  bool is_default = false;
};

struct Samples {
  std::vector<double> step_ms;
  std::vector<double> data_wait_percent;
  int failures = 0;
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

// The environment of a child: ours without any variable that picks threads or a wait policy, plus
// the setting's.
std::vector<std::string> child_environment(const Setting& s) {
  static const char* kDropped[] = {"OMP_NUM_THREADS",    "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "HALFGRAD_SPIN_DEFAULT",
                                   "HALFGRAD_NO_REEXEC", "OMP_DISPLAY_ENV", "OMP_PROC_BIND",  "OMP_PLACES"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string key = var.substr(0, var.find('='));
    if (std::find_if(std::begin(kDropped), std::end(kDropped), [&](const char* d) { return key == d; }) ==
        std::end(kDropped))
      env.push_back(var);
  }
  if (s.wait == "libgomp") env.push_back("HALFGRAD_NO_REEXEC=1");
  if (s.wait == "passive") env.push_back("OMP_WAIT_POLICY=passive");
  if (s.wait == "bounded") env.push_back("GOMP_SPINCOUNT=" + std::to_string(s.spin));
  return env;
}

// Runs train_gpt once with the setting; appends its step times (after `skip`) to `out`.
void run_once(const std::string& train_gpt, const Setting& s, int64_t steps, int64_t skip, const std::string& dir,
              Samples& out) {
  const std::string metrics = dir + "/metrics.jsonl", stdout_path = dir + "/stdout.txt";
  std::remove(metrics.c_str());
  std::vector<std::string> args = {
      train_gpt,         "--steps", std::to_string(steps), "--eval-every", "0",        "--sample", "0",
      "--eval-problems", "10",      "--metrics-log",       metrics,        "--warmup", "0"};
  if (s.workers >= 0) args.insert(args.end(), {"--workers", std::to_string(s.workers)});
  if (s.threads > 0) args.insert(args.end(), {"--threads", std::to_string(s.threads)});
  const std::vector<std::string> env = child_environment(s);
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ++out.failures;
    return;
  }
  std::ifstream log(metrics);
  std::string line;
  for (int64_t step = 0; std::getline(log, line); ++step) {
    const size_t at = line.find("\"step_ms\":");
    if (at != std::string::npos && step >= skip) out.step_ms.push_back(std::atof(line.c_str() + at + 10));
  }
  std::ifstream text(stdout_path);
  std::stringstream all;
  all << text.rdbuf();
  const std::string summary = all.str();
  const size_t at = summary.find("waiting for data ");
  if (at != std::string::npos) out.data_wait_percent.push_back(std::atof(summary.c_str() + at + 17));
}

// `n` processes spinning one thread each, until stop_busy().
std::vector<pid_t> start_busy(int64_t n) {
  std::vector<pid_t> pids;
  for (int64_t i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

void stop_busy(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

std::vector<Setting> matrix(int cores, bool quick, const std::vector<int64_t>& spins) {
  std::vector<int> thread_counts = {1, 2};
  if (cores > 2) thread_counts.push_back(cores);
  std::vector<Setting> out;
  out.push_back({"default", -1, 0, "default", 0, true});
  for (int workers : quick ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2})
    for (int threads : thread_counts) {
      std::string name = "w";
      name.append(std::to_string(workers)).append(" t").append(std::to_string(threads)).append(" ");
      out.push_back({name + "libgomp", workers, threads, "libgomp", 0, false});
      out.push_back({name + "passive", workers, threads, "passive", 0, false});
      for (int64_t spin : spins)
        out.push_back({name + "spin" + std::to_string(spin), workers, threads, "bounded", spin, false});
    }
  return out;
}

void run_matrix(const std::string& train_gpt, const std::vector<Setting>& settings, int64_t busy, int64_t steps,
                int64_t skip, int64_t rounds, const std::string& dir, int cores) {
  std::map<std::string, Samples> results;
  const std::vector<pid_t> competitors = start_busy(busy);
  for (int64_t round = 0; round < rounds; ++round) {
    // Alternate the order, so no setting always runs first or last in a round.
    std::vector<Setting> order = settings;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (const Setting& s : order) run_once(train_gpt, s, steps, skip, dir, results[s.name]);
  }
  stop_busy(competitors);
  std::string best;
  double best_median = INFINITY, default_median = NAN;
  for (const Setting& s : settings) {
    const Samples& r = results[s.name];
    const double median = quantile(r.step_ms, 0.5);
    if (s.is_default)
      default_median = median;
    else if (median < best_median)
      best_median = median, best = s.name;
    bench::JsonLine("threads")
        .add("setting", s.name)
        .add("busy_processes", (long long)busy)
        .add("cores", cores)
        .add("workers", s.workers)
        .add("threads", s.threads)
        .add("wait", s.wait)
        .add("spin", (long long)s.spin)
        .add("default", s.is_default)
        .add("steps_timed", (long long)r.step_ms.size())
        .add("median_ms", median)
        .add("p90_ms", quantile(r.step_ms, 0.9))
        .add("data_wait_percent", quantile(r.data_wait_percent, 0.5))
        .add("failed_runs", r.failures)
        .print();
  }
  bench::JsonLine("threads_summary")
      .add("busy_processes", (long long)busy)
      .add("cores", cores)
      .add("best", best)
      .add("best_median_ms", best_median)
      .add("default_median_ms", default_median)
      .add("default_over_best", default_median / best_median)
      .add("default_within_5_percent", default_median <= 1.05 * best_median)
      .print();
}

}  // namespace

int main(int argc, char** argv) {
  samples::Flags flags("bench_threads", "train_gpt's step time over thread settings (JSON lines)");
  std::string& train_gpt = flags.add_string("train-gpt", HG_TRAIN_GPT, "the train_gpt binary to run");
  int64_t& steps = flags.add_int("steps", 80, "steps per run", 2);
  int64_t& skip = flags.add_int("skip", 10, "leading steps of each run left out of the statistics", 0);
  int64_t& rounds = flags.add_int("rounds", 2, "interleaved rounds over the matrix", 1);
  int64_t& busy = flags.add_int("busy", 1, "competing spinning processes for the second matrix (0: none)", 0, 64);
  std::string& spin_list =
      flags.add_string("spin", "1000,3000,10000", "comma-separated GOMP_SPINCOUNT values for the bounded rows");
  bool& quick = flags.add_bool("quick", false, "a smaller matrix (workers 0/1), 20 steps, one round");
  flags.parse(argc, argv);
  if (quick) steps = std::min<int64_t>(steps, 20), skip = std::min<int64_t>(skip, 5), rounds = 1;
  if (skip >= steps) samples::exit_with_usage_error("bench_threads", "--skip must be below --steps");
  char dir_template[] = "/tmp/bench_threads.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) samples::exit_with_usage_error("bench_threads", "cannot create a directory in /tmp");
  const int cores = samples::usable_cores();
  std::vector<int64_t> spins;
  for (std::stringstream list(spin_list); list.good();) {
    std::string item;
    std::getline(list, item, ',');
    char* end = nullptr;
    const long long spin = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || spin < 0)
      samples::exit_with_usage_error("bench_threads",
                                     "--spin " + spin_list + ": expected integers >= 0, comma-separated");
    spins.push_back(spin);
  }
  const std::vector<Setting> settings = matrix(cores, quick, spins);
  run_matrix(train_gpt, settings, 0, steps, skip, rounds, dir, cores);
  if (busy > 0) run_matrix(train_gpt, settings, busy, steps, skip, rounds, dir, cores);
  std::remove((std::string(dir) + "/metrics.jsonl").c_str());
  std::remove((std::string(dir) + "/stdout.txt").c_str());
  rmdir(dir);
  return 0;
}

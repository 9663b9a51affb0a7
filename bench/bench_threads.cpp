// bench_threads: train_gpt's step time over a matrix of thread settings, one JSON object per line.
//
// Each setting runs the real train_gpt (its Trainer, its DataLoader, the sample's default GPT on the
// addition task) in a child process of its own, because the OpenMP settings are environment read
// once when libgomp loads: workers {0, 1} x OpenMP threads {1, 2, the usable cores when more} x wait
// policy {libgomp's default spin (HALFGRAD_NO_REEXEC=1, GOMP_SPINCOUNT unset), passive
// (OMP_WAIT_POLICY; spin 0), bounded (GOMP_SPINCOUNT=N for each N of --spin: 300 and 3000, the
// samples' value)} -- 17 settings on 2 cores, sized so the full run (two rounds, alone and with
// --busy) takes about 6 minutes on a quiet 2-core VM -- plus "default": train_gpt with no thread
// flag and a clean environment, what a user gets (app/thread_defaults.h). The step times come
// from the run's --metrics-log (step_ms), the first --skip steps dropped; the settings run in
// --rounds interleaved rounds and each setting's steps are pooled, so drift hits all of them alike.
// One line per setting: median and p90 ms/step, the share of time the step waited for data (null
// when a run of it outlived --run-timeout: a collapse, reported as such, never the best); then a
// summary line per matrix (alone, then with --busy): the best setting by median, the default's
// median over it (target: within 5%), verdict_steady (both of those settings' p90 within 1.2x their
// median: otherwise their steps straddled a change of the machine's speed, and the verdict is not to
// be read; a warning on stderr says so), the matrix's wall time.
// --busy N repeats the matrix with N competing processes, each spinning one thread (the samples
// must no longer collapse when something else shares the cores).
// Usage: bench_threads [--train-gpt PATH] [--steps 40] [--skip 8] [--rounds 2] [--busy 1] [--spin 300,3000]
//                      [--quick]
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/thread_defaults.h"
#include "json_line.h"

extern char** environ;

using namespace hg;

namespace {

// A setting's steps count as steady when their p90 is at most this many times their median.
constexpr double kSteadyP90OverMedian = 1.2;

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
  int timeouts = 0;  // runs killed at --run-timeout (a collapse: such a setting never counts as best)
};

// `value` as a JSON number, or null when it is not finite (no run produced it).
bench::JsonLine& add_number(bench::JsonLine& line, const std::string& key, double value) {
  return std::isfinite(value) ? line.add(key, value) : line.add_raw(key, "null");
}

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
// A run still going after `timeout_s` is killed and counted in out.timeouts (with --busy, a setting
// that collapses 10-20x would otherwise take most of the bench's time).
void run_once(const std::string& train_gpt, const Setting& s, int64_t steps, int64_t skip, double timeout_s,
              const std::string& dir, Samples& out) {
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
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Killing the bench kills the run it is timing too (the death signal survives the exec).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (pid < 0) {  // no child: nothing to wait for
    ++out.failures;
    return;
  }
  int status = 0;
  timespec start{}, now{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) {
      ++out.failures;
      return;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (double(now.tv_sec - start.tv_sec) + 1e-9 * double(now.tv_nsec - start.tv_nsec) > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ++out.timeouts;
      return;
    }
    const timespec tick{0, 20'000'000};
    nanosleep(&tick, nullptr);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
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

// `n` processes spinning one thread each, until stop_busy() (or the bench's death: each gets
// SIGKILL when its parent exits, so killing the bench never leaves spinners behind).
std::vector<pid_t> start_busy(int64_t n) {
  std::vector<pid_t> pids;
  const pid_t parent = getpid();
  for (int64_t i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);  // the parent died before the prctl took effect
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

void stop_busy(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {  // only real children: a failed fork (-1) was never recorded
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

std::vector<Setting> matrix(int cores, bool quick, const std::vector<int64_t>& spins) {
  std::vector<int> thread_counts = {1, 2};
  if (cores > 2) thread_counts.push_back(cores);
  std::vector<Setting> out;
  out.push_back({"default", -1, 0, "default", 0, true});
  for (int workers : {0, 1})
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
                int64_t skip, int64_t rounds, double timeout_s, const std::string& dir, int cores) {
  std::map<std::string, Samples> results;
  timespec start{}, end{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  const std::vector<pid_t> competitors = start_busy(busy);
  for (int64_t round = 0; round < rounds; ++round) {
    // Alternate the order, so no setting always runs first or last in a round.
    std::vector<Setting> order = settings;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (const Setting& s : order) run_once(train_gpt, s, steps, skip, timeout_s, dir, results[s.name]);
  }
  stop_busy(competitors);
  clock_gettime(CLOCK_MONOTONIC, &end);
  std::string best;
  double best_median = INFINITY, default_median = NAN, best_p90 = NAN, default_p90 = NAN;
  for (const Setting& s : settings) {
    const Samples& r = results[s.name];
    // A setting with a run killed at the timeout has no honest median: null, never the best.
    const double median = r.timeouts > 0 ? NAN : quantile(r.step_ms, 0.5);
    const double p90 = r.timeouts > 0 ? NAN : quantile(r.step_ms, 0.9);
    if (s.is_default)
      default_median = median, default_p90 = p90;
    else if (median < best_median)
      best_median = median, best = s.name, best_p90 = p90;
    bench::JsonLine line("threads");
    line.add("setting", s.name)
        .add("busy_processes", (long long)busy)
        .add("cores", cores)
        .add("workers", s.workers)
        .add("threads", s.threads)
        .add("wait", s.wait)
        .add("spin", (long long)s.spin)
        .add("default", s.is_default)
        .add("steps_timed", (long long)r.step_ms.size())
        .add("failed_runs", r.failures)
        .add("timed_out_runs", r.timeouts);
    add_number(line, "median_ms", median);
    add_number(line, "p90_ms", p90);
    // What a collapse is at least: the whole timeout spread over the steps it did not finish.
    add_number(line, "timed_out_floor_ms", r.timeouts > 0 ? 1e3 * timeout_s / double(steps) : NAN);
    add_number(line, "data_wait_percent", quantile(r.data_wait_percent, 0.5));
    line.print();
  }
  bench::JsonLine summary("threads_summary");
  summary.add("busy_processes", (long long)busy).add("cores", cores).add("best", best);
  add_number(summary, "best_median_ms", best_median);
  add_number(summary, "default_median_ms", default_median);
  add_number(summary, "default_over_best", default_median / best_median);
  // The verdict compares two medians; it holds only when neither setting's steps straddled a change of
  // the machine's speed (a shared VM's can change for minutes at a time: docs/threads.md), which shows
  // as a p90 far above the median.
  const bool measured = std::isfinite(default_p90) && std::isfinite(best_p90);
  const bool steady =
      measured && default_p90 <= kSteadyP90OverMedian * default_median && best_p90 <= kSteadyP90OverMedian * best_median;
  summary.add("default_within_5_percent", default_median <= 1.05 * best_median)
      .add("verdict_steady", steady)
      .add("settings", (long long)settings.size())
      .add("rounds", (long long)rounds)
      .add("wall_s", double(end.tv_sec - start.tv_sec) + 1e-9 * double(end.tv_nsec - start.tv_nsec))
      .print();
  if (measured && !steady)
    std::fprintf(stderr,
                 "bench_threads: the default's or the best setting's p90 is over %.1fx its median: the machine's "
                 "speed changed while they ran; rerun before reading default_over_best\n",
                 kSteadyP90OverMedian);
}

}  // namespace

int main(int argc, char** argv) {
  app::Flags flags("bench_threads", "train_gpt's step time over thread settings (JSON lines)");
  std::string& train_gpt = flags.add_string("train-gpt", HG_TRAIN_GPT, "the train_gpt binary to run");
  int64_t& steps = flags.add_int("steps", 40, "steps per run", 2);
  int64_t& skip = flags.add_int("skip", 8, "leading steps of each run left out of the statistics", 0);
  int64_t& rounds = flags.add_int("rounds", 2, "interleaved rounds over the matrix", 1);
  int64_t& busy = flags.add_int("busy", 1, "competing spinning processes for the second matrix (0: none)", 0, 64);
  std::string& spin_list =
      flags.add_string("spin", "300,3000", "comma-separated GOMP_SPINCOUNT values for the bounded rows");
  double& run_timeout = flags.add_double(
      "run-timeout", 20.0, "seconds before a run is killed and its setting reported as collapsed (null median)", 1.0);
  bool& quick = flags.add_bool("quick", false, "a smoke run: 12 steps, 3 skipped, one round (same matrix)");
  flags.parse(argc, argv);
  if (quick) steps = std::min<int64_t>(steps, 12), skip = std::min<int64_t>(skip, 3), rounds = 1;
  if (skip >= steps) app::exit_with_usage_error("bench_threads", "--skip must be below --steps");
  char dir_template[] = "/tmp/bench_threads.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) app::exit_with_usage_error("bench_threads", "cannot create a directory in /tmp");
  const int cores = app::usable_cores();
  std::vector<int64_t> spins;
  for (std::stringstream list(spin_list); list.good();) {
    std::string item;
    std::getline(list, item, ',');
    char* end = nullptr;
    const long long spin = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || spin < 0)
      app::exit_with_usage_error("bench_threads",
                                     "--spin " + spin_list + ": expected integers >= 0, comma-separated");
    spins.push_back(spin);
  }
  const std::vector<Setting> settings = matrix(cores, quick, spins);
  run_matrix(train_gpt, settings, 0, steps, skip, rounds, run_timeout, dir, cores);
  if (busy > 0) run_matrix(train_gpt, settings, busy, steps, skip, rounds, run_timeout, dir, cores);
  std::remove((std::string(dir) + "/metrics.jsonl").c_str());
  std::remove((std::string(dir) + "/stdout.txt").c_str());
  rmdir(dir);
  return 0;
}

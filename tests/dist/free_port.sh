# Sourced by the TCP launchers of the tests (run_env.sh, check_rendezvous.sh, check_rank_failure_resume.sh):
#   free_port   prints a TCP port for MASTER_PORT: random in 20000-31999, below Linux's ephemeral range
#               (32768-60999 by default), where the kernel picks the local ports of outgoing connections,
#               so that no client socket of a test running beside it (ctest -j) holds it; and one on which
#               nothing listens on loopback now.
free_port() {
  local port _
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 12000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  done
  echo "$port"
}

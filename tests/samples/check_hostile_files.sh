#!/usr/bin/env bash
# Every sample on files a new user might hand it that are not what it expects -- empty, random bytes,
# a cut safetensors file, a directory, a FIFO, a file without read permission, JSON that is not UTF-8,
# a header length of 2^63, a GPT-2-layout file with a block index that is no number -- through every
# flag that reads one (train_gpt --load/--data/--config, a checkpoint entry under --resume; train_mlp,
# train_cnn, prepare_data --config; prepare_data --input/--tokenizer; plot_metrics' log; generate
# --model/--tokenizer; tokenize --tokenizer/--train and the ids --decode reads), plus tokenizer files
# of the wrong kind (a WordPiece tokenizer.json, vocab.json without merges.txt, /dev/zero) and token
# shards (the HGTOKENS magic) with a bad header. Each run must exit 2
# with one line "<program>: error: <flag or file> ..." and never print "terminate called", "Aborted"
# or a sanitizer report, nor hang (each run is bounded by `timeout`).
# Usage: check_hostile_files.sh BIN_DIR
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cases=0
tiny=(--layers 1 --heads 2 --dim 16 --context 16 --batch 4 --eval-problems 10 --eval-every 0 --sample 0 --threads 1)

# ---- the hostile files ----
h=$work/hostile
mkdir "$h"
: > "$h/empty"
head -c 4096 /dev/urandom > "$h/random"
"$bin/train_gpt" "${tiny[@]}" --steps 1 --save "$work/model.safetensors" >/dev/null || fail "could not save a model"
head -c $(( $(stat -c %s "$work/model.safetensors") - 7 )) "$work/model.safetensors" > "$h/truncated"
mkdir "$h/directory"
mkfifo "$h/fifo"
head -c 512 /dev/urandom > "$h/no_permission" && chmod 000 "$h/no_permission"
printf '{"steps": "\xff\xfe caf\xe9"}' > "$h/latin1_json"
# safetensors: a header length of 2^63 (then a few bytes)
printf '\x00\x00\x00\x00\x00\x00\x00\x80{}      ' > "$h/huge_header"
# A GPT-2-layout file (no halfgrad format metadata) whose block key has no index: "h.x.attn...".
gpt2_header='{"wte.weight":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},"wpe.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[32,48]},"h.x.attn.c_attn.weight":{"dtype":"F32","shape":[2,6],"data_offsets":[48,96]}}'
{
  len=${#gpt2_header}
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' $((len & 255)) $((len >> 8 & 255)) \
    $((len >> 16 & 255)) $((len >> 24 & 255)))"
  printf '%s' "$gpt2_header"
  head -c 96 /dev/zero
} > "$h/gpt2_bad_block_index"
kinds=(empty random truncated directory fifo no_permission latin1_json huge_header gpt2_bad_block_index)

# run PROGRAM "first words" ARGS... [--accept-success]: exit code 2, one line on stderr starting
# "PROGRAM: error: first words", no abort, no runtime or sanitizer text (with --accept-success as the
# last argument, exit code 0 passes too: input that is valid after all).
run() {
  local program=$1 first=$2
  shift 2
  local accept_success=0
  if [[ ${!#} == --accept-success ]]; then
    accept_success=1
    set -- "${@:1:$(($# - 1))}"
  fi
  local err code
  err=$(timeout 60 "$bin/$program" "$@" 2>&1 >/dev/null)
  code=$?
  [[ $code -ne 124 ]] || fail "$program $* hung (killed after 60 s)"
  grep -qE "terminate called|Aborted|Sanitizer|runtime error:|Segmentation|core dumped" <<<"$err" &&
    fail "$program $* crashed: $err"
  if [[ $accept_success -eq 1 && $code -eq 0 ]]; then
    cases=$((cases + 1))
    return
  fi
  [[ $code -eq 2 ]] || fail "$program $* exited $code, expected 2: $err"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "$program $* printed more than one line: $err"
  [[ $err == "$program: error: $first"* ]] || fail "$program $* said '$err', expected '$program: error: $first...'"
  cases=$((cases + 1))
}

for kind in "${kinds[@]}"; do
  f=$h/$kind
  # ---- train_gpt: a model, a data file, a run config file, a checkpoint entry ----
  run train_gpt "--load " "${tiny[@]}" --steps 1 --load "$f"
  # --data: any readable bytes are text for the byte-level model (a long enough file trains: exit 0);
  # what cannot be read, or holds no window of context + 1 bytes, is refused.
  case $kind in
    empty | directory | fifo) run train_gpt "--data " "${tiny[@]}" --steps 1 --data "$f" ;;
    no_permission) [[ $(id -u) -ne 0 ]] && run train_gpt "--data " "${tiny[@]}" --steps 1 --data "$f" ;;
    *) run train_gpt "--data " "${tiny[@]}" --steps 1 --data "$f" --accept-success ;;
  esac
  # A FIFO is a valid --config (a pipe: `--config <(...)`); with no writer it would wait, as cat does.
  if [[ $kind != fifo ]]; then
    for program in train_gpt train_mlp train_cnn prepare_data; do run "$program" "" --config "$f"; done
  fi
  # The hostile file as the only checkpoint entry: refused on --resume, naming the entry. (A FIFO or a
  # directory there is no entry of the layout: the run starts afresh, which is right.)
  if [[ $kind != fifo && $kind != directory ]]; then
    ckpt=$work/ckpt_$kind
    mkdir "$ckpt"
    cp "$f" "$ckpt/step_0000000001.safetensors"
    [[ $kind == no_permission ]] && chmod 000 "$ckpt/step_0000000001.safetensors"
    run train_gpt "--resume" "${tiny[@]}" --steps 2 --checkpoint-dir "$ckpt" --resume
  fi
  # A file where the checkpoint directory should be.
  case $kind in
    directory) ;;
    *) run train_gpt "--checkpoint-dir " "${tiny[@]}" --steps 2 --checkpoint-dir "$f" --checkpoint-every-steps 1 ;;
  esac
  # ---- prepare_data: any readable bytes are text, so only what cannot be read is refused ----
  case $kind in
    empty | directory | fifo) run prepare_data "--input " --input "$f" --output "$work/shard" ;;
    no_permission) [[ $(id -u) -ne 0 ]] && run prepare_data "--input " --input "$f" --output "$work/shard" ;;
  esac
  # ---- plot_metrics: the log ----
  if [[ $kind != fifo ]]; then run plot_metrics "input $f" "$f" -o "$work/out.svg"; fi
done

# ---- the text tools: a tokenizer file (generate, tokenize, prepare_data), a corpus, ids to decode ----
printf 'the quick brown fox jumps over the lazy dog. %.0s' {1..40} > "$work/corpus.txt"
"$bin/tokenize" --train "$work/corpus.txt" -o "$work/tok.json" --vocab-size 280 >/dev/null ||
  fail "could not train a tokenizer"
# Tokenizer-file kinds: valid JSON that is no tokenizer.json halfgrad reads; vocab.json without its
# merges.txt (named as the file, and as a directory holding only it).
printf '{"model": {"type": "WordPiece", "vocab": {}}}' > "$h/tokenizer_wordpiece.json"
mkdir "$h/vocab_only"
printf '{"a": 0, "b": 1}' > "$h/vocab_only/vocab.json"
tokenizer_kinds=("${kinds[@]}" tokenizer_wordpiece.json vocab_only vocab_only/vocab.json)
for kind in "${tokenizer_kinds[@]}"; do
  f=$h/$kind
  [[ $kind == no_permission && $(id -u) -eq 0 ]] && continue  # root reads it: nothing to refuse
  run generate "--tokenizer " --model "$work/model.safetensors" --tokenizer "$f" --prompt "the" --max-tokens 2
  run tokenize "--tokenizer " --tokenizer "$f" </dev/null
  run tokenize "--tokenizer " --tokenizer "$f" --decode </dev/null
  run prepare_data "--tokenizer " --input "$work/corpus.txt" --output "$work/tshard" --tokenizer "$f"
done
# A device as the tokenizer: refused at once, not read until memory runs out.
run tokenize "--tokenizer " --tokenizer /dev/zero </dev/null
run prepare_data "--tokenizer " --input "$work/corpus.txt" --output "$work/tshard" --tokenizer /dev/zero
for kind in "${kinds[@]}"; do
  f=$h/$kind
  # generate's model
  case $kind in
    no_permission) [[ $(id -u) -ne 0 ]] && run generate "--model " --model "$f" --prompt "the" --max-tokens 2 ;;
    *) run generate "--model " --model "$f" --prompt "the" --max-tokens 2 ;;
  esac
  # tokenize --train: any readable bytes are a corpus; what cannot be read is refused.
  case $kind in
    directory | fifo) run tokenize "--train " --train "$f" -o "$work/trained.json" --vocab-size 260 ;;
    no_permission) [[ $(id -u) -ne 0 ]] && run tokenize "--train " --train "$f" -o "$work/trained.json" --vocab-size 260 ;;
    *) run tokenize "--train " --train "$f" -o "$work/trained.json" --vocab-size 260 --accept-success ;;
  esac
  # tokenize --decode: the ids on stdin (regular files only: a shell cannot redirect a directory)
  case $kind in
    directory | fifo | no_permission) ;;
    empty) run tokenize "--decode" --tokenizer "$work/tok.json" --decode <"$f" --accept-success ;;
    *) run tokenize "--decode" --tokenizer "$work/tok.json" --decode <"$f" ;;
  esac
done

# ---- train_gpt --data: files that carry the token-shard magic are shards, and a bad header is refused ----
shard_header() {  # version dtype count vocab: the 32-byte header, little-endian
  local v
  printf 'HGTOKENS'
  for v in "$1" "$2"; do printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))"; done
  for v in "$3" "$4"; do
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)) \
      $((v >> 16 & 255)) $((v >> 24 & 255)) $((v >> 32 & 255)) $((v >> 40 & 255)) $((v >> 48 & 255)) $((v >> 56 & 255)))"
  done
}
{ shard_header 9 2 64 256; head -c 128 /dev/zero; } > "$h/shard_version"              # another version
{ shard_header 1 3 64 256; head -c 128 /dev/zero; } > "$h/shard_dtype"                # no such dtype
{ shard_header 1 2 1152921504606846976 256; head -c 128 /dev/zero; } > "$h/shard_count"  # 2^60 tokens
{ shard_header 1 2 64 256; head -c 100 /dev/zero; } > "$h/shard_cut"                  # 14 bytes short
printf 'HGTOKENS\x01\x00' > "$h/shard_header_cut"                                     # the header cut
for kind in shard_version shard_dtype shard_count shard_cut shard_header_cut; do
  run train_gpt "--data " "${tiny[@]}" --steps 1 --data "$h/$kind"
done

if [[ $(id -u) -eq 0 ]]; then
  echo "note: running as root, which reads a file without read permission: the no_permission cases were skipped"
fi
echo "hostile files ok: $cases runs, each exit code 2 with one line and no crash"

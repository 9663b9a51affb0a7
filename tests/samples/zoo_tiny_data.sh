# Sourced by the zoo's scripts (check_zoo.sh, check_zoo_cuda.sh); make_tiny_chains is at the end:
#   make_tiny_mnist DIR SEED   writes the four MNIST-format files of a tiny 4-class problem into DIR:
#                              8x8 u8 images whose class k has a bright row 2k over dim random noise,
#                              64 training images (the images file gzip-compressed, as Debian ships
#                              them) and 32 test images; the noise is drawn from SEED.
u8() { printf -v hex '%02x' "$1"; printf "\\x$hex"; }
be32() { u8 $((($1 >> 24) & 255)); u8 $((($1 >> 16) & 255)); u8 $((($1 >> 8) & 255)); u8 $(($1 & 255)); }

# write_tiny_split PREFIX COUNT: PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte.
write_tiny_split() {
  local prefix=$1 count=$2 i y x label
  {
    u8 0; u8 0; u8 8; u8 3; be32 "$count"; be32 8; be32 8
    for ((i = 0; i < count; ++i)); do
      label=$((i % 4))
      for ((y = 0; y < 8; ++y)); do
        for ((x = 0; x < 8; ++x)); do
          if ((y == 2 * label)); then u8 $((170 + RANDOM % 86)); else u8 $((RANDOM % 90)); fi
        done
      done
    done
  } >"$prefix-images-idx3-ubyte"
  {
    u8 0; u8 0; u8 8; u8 1; be32 "$count"
    for ((i = 0; i < count; ++i)); do u8 $((i % 4)); done
  } >"$prefix-labels-idx1-ubyte"
}

make_tiny_mnist() {
  local dir=$1
  RANDOM=$2
  mkdir -p "$dir"
  write_tiny_split "$dir/train" 64
  write_tiny_split "$dir/t10k" 32
  gzip -n "$dir/train-images-idx3-ubyte"
}

#   make_tiny_words FILE SEED  writes 400 words of one to three syllables from a set of eight (ba, co, di, ...),
#                              one per line, and a few lines a word list skips (capitals, apostrophes)
make_tiny_words() {
  local syllables=(ba co di ma ne ro su ti) i k word
  RANDOM=$2
  {
    for ((i = 0; i < 400; ++i)); do
      word=""
      for ((k = 0; k <= RANDOM % 3; ++k)); do word+=${syllables[RANDOM % 8]}; done
      echo "$word"
    done
    printf "Capital\ndon't\n"
  } >"$1"
}

#   make_tiny_cifar DIR SEED   writes a tiny CIFAR-10 binary directory: data_batch_1..5.bin of 8 records each
#                              and test_batch.bin of 8, labels i % 4, pixels 1..255 drawn from SEED
make_tiny_cifar() {
  local dir=$1 seed=$2 file index=0
  mkdir -p "$dir"
  for file in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
    LC_ALL=C awk -v seed=$((seed * 8 + index++)) 'BEGIN {
      srand(seed)
      for (r = 0; r < 8; ++r) { printf "%c", r % 4; for (b = 0; b < 3072; ++b) printf "%c", 1 + int(rand() * 255) }
    }' >"$dir/$file.bin"
  done
}

#   make_tiny_chains FILE SEED  writes 400 lines of four words: a random one of the eight syllables and the
#                              three that follow it in a fixed cycle (ba co di ma ne ro su ti ba ...), so a
#                              language model can learn all but each line's first word
make_tiny_chains() {
  local syllables=(ba co di ma ne ro su ti) i j k line
  RANDOM=$2
  for ((i = 0; i < 400; ++i)); do
    k=$((RANDOM % 8)) line=""
    for ((j = 0; j < 4; ++j)); do line+="${syllables[$(((k + j) % 8))]} "; done
    echo "$line"
  done >"$1"
}

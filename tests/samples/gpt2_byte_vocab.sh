# Sourced by the samples' scripts that write a GPT-2 vocab.json by hand (check_generate.sh,
# check_train_text.sh):
#   gpt2_byte_vocab_entries   prints the 256 byte tokens as vocab.json entries, '"\uXXXX": b, ' for byte b
#                             (ids 0..255), each byte spelled in GPT-2's bytes_to_unicode alphabet:
#                             printable bytes as themselves, the rest from U+0100 in byte order
gpt2_byte_vocab_entries() {
  local n=0 b cp
  for ((b = 0; b < 256; b++)); do
    if (( (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255) )); then cp=$b
    else cp=$((256 + n)); n=$((n + 1)); fi
    printf '"\\u%04x": %d, ' "$cp" "$b"
  done
}

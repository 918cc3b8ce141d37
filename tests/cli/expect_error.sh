#!/usr/bin/env bash
# expect_error.sh REGEX CMD...
# Passes when CMD exits non-zero and prints exactly one line on stderr that
# matches the extended regular expression REGEX (bad input must give one clear
# line, not a crash or a stack of messages).
regex=$1
shift
stderr=$("$@" 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 0 ]]; then
  echo "expected a non-zero exit from: $*" >&2
  exit 1
fi
if [[ $rc -ge 128 ]]; then
  echo "crashed with signal $((rc - 128)): $*" >&2
  echo "$stderr" >&2
  exit 1
fi
lines=$(printf '%s\n' "$stderr" | grep -c .)
if [[ $lines -ne 1 ]]; then
  echo "expected one line on stderr, got $lines:" >&2
  echo "$stderr" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$stderr"; then
  echo "stderr does not match /$regex/:" >&2
  echo "$stderr" >&2
  exit 1
fi
echo "ok: $stderr"
